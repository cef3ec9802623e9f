"""`python -m kubegpu` is the `kubegpu` command (used by the simulator to run pods)."""

from kubegpu.cli import main

main()
