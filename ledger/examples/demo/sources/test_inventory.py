"""Tests of the demo inventory; test_restock fails because of BUG-20."""

from inventory import Inventory


def test_restock():
    shop = Inventory()
    shop.add_item("apple", "0.50", quantity=2)
    shop.restock("apple", 5)
    assert shop.stock["apple"] == 7


def test_sell_uses_decimal_prices():
    shop = Inventory()
    shop.add_item("pear", "0.10", quantity=3)
    assert shop.sell("pear", 3) == shop.prices["pear"] * 3
