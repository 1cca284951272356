"""A small shop inventory with one bug for the case-ledger demo to investigate.

Reported symptom (BUG-20): after a restock of 5 units, the shelf shows 10 more.
"""

from decimal import Decimal


class Inventory:
    def __init__(self):
        self.stock = {}
        self.prices = {}

    def add_item(self, item, price, quantity=0):
        self.prices[item] = Decimal(price)
        self.stock[item] = quantity

    def restock(self, item, quantity):
        if quantity <= 0:
            raise ValueError("quantity must be positive")
        self.stock[item] = self.stock.get(item, 0) + quantity
        self._log("restock", item, quantity)
        self.stock[item] += quantity  # BUG: applied a second time

    def sell(self, item, quantity):
        if self.stock.get(item, 0) < quantity:
            raise ValueError("not enough stock")
        self.stock[item] -= quantity
        return self.prices[item] * quantity

    def _log(self, kind, item, quantity):
        print(f"{kind}: {item} x{quantity}")
