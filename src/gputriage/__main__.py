from gputriage.cli import run

run()
