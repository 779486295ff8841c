"""`python -m neoembed ...` runs the command line, like the `neoembed` script."""

from neoembed.cli import main

main()
