#!/usr/bin/env python3
"""Runs the harness's own tests (python3 -m unittest discover -s bench/tests, the same thing) and
ends with one line 'N passed, N failed, N skipped'; exits non-zero when any failed."""
import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
suite = unittest.defaultTestLoader.discover(here, top_level_dir=here)
result = unittest.TextTestRunner(verbosity=1).run(suite)
failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
skipped = len(result.skipped)
passed = result.testsRun - failed - skipped
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
