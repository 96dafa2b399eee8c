"""Budget: the window, what is reserved, how it is shared, and fitting blocks into it (P0/P1/P2)."""
