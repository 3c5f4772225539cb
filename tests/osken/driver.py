"""Runs an os-ken application (the switch test tool, Faucet) as the
controller: `driver.py APP_MODULE [os-ken options]`.

os-ken 4.x ships no `osken-manager` script (and Faucet's own entry point
execs one), so this loads the app the way the manager would. The options
are os-ken's, e.g. --ofp-tcp-listen-port and --test-switch-dir.
"""
import os
import sys

# os-ken's apps need eventlet's hub (os-ken 4.x defaults to another one).
os.environ.setdefault("OSKEN_HUB_TYPE", "eventlet")

from os_ken import cfg  # noqa: E402
from os_ken import log  # noqa: E402  (registers the logging options)
from os_ken.base import app_manager  # noqa: E402


def main():
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: driver.py APP_MODULE [os-ken options]")
    log.early_init_log()
    cfg.CONF(args=sys.argv[2:], project="os_ken")
    log.init_log()
    app_manager.AppManager.run_apps([sys.argv[1]])


if __name__ == "__main__":
    main()
