"""`python -m kubegpu.device_plugin '<json>'`: what `kubegpu device-plugin` execs into."""

import sys

from kubegpu.device_plugin.runner import main

sys.exit(main(sys.argv[1:]))
