import sys

from streamanon.cli import entry

sys.exit(entry())
