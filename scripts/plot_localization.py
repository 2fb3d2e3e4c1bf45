#!/usr/bin/env python3
"""Plots the output of `ndtcu localize`: the same as `python3 -m ndtcu.plot OUT_DIR`
(src/python/ndtcu/plot.py), with the package installed or PYTHONPATH=build/python.

    python3 scripts/plot_localization.py OUT_DIR
"""
from ndtcu.plot import main

if __name__ == "__main__":
    main()
