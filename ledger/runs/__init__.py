"""Your own agent runs in: coding-agent trajectories turned into journals of derived facts
(``trajectories``), with the map from a shell command to an action name and target (``actions``)."""
