"""The measuring scripts (``make bench``, ``make load``, ``make rounds``), kept out of the installed
package: they are for the people who change nightshift, run from a checkout as ``python -m
benchmarks.NAME``, and drive the installed server and emulator like a user would."""
