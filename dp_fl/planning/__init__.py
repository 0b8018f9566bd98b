"""Planning a private run before launching it, and paper 004's figures from the library."""
