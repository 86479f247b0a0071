"""Fast PE studies straight on synthetic tasks: grid runner, statistics, report."""
