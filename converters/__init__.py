"""Dataset converters (PNG/JPEG trees to sharded L3 datasets); installed as ``l3codec.converters``."""
