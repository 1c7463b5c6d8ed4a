"""firepool: a broker for warm GPU and CPU capacity."""

__version__ = "0.1.0"
