"""timetravel: deterministic simulation testing and a time-travel debugger for distributed training."""

__version__ = "0.1.0"
