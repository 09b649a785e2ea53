"""pyverbs.providers.mlx5: stand-ins (see pyverbs.providers): soft0 is not an mlx5 device."""
