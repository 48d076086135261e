"""Protocol fuzzing harness (issue 17 item 6): generators, mutators, runner and its tests."""
