import sys

from streamanon.cli import main

sys.exit(main())
