"""Graph-mode data-parallel inference (public API assembled once all modules exist)."""
