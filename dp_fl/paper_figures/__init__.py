"""Paper 004's figures from the library: one module per figure, compute → JSON → draw."""
