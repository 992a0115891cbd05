"""The package version, in a module of its own: the compiler core stamps it on every generated kernel
without importing the package root."""

__version__ = "0.1.0"
