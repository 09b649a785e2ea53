"""pyverbs.providers.efa: stand-ins (see pyverbs.providers): soft0 is not an efa device."""
