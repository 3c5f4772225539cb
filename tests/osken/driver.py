"""Runs os-ken's OpenFlow switch test tool as the controller.

os-ken 4.x ships no `osken-manager` script, so this loads the tester app
(os_ken.tests.switch.tester) the way the manager would. Its arguments are
os-ken's own options, e.g. --test-switch-dir and --ofp-tcp-listen-port.
The tester prints a report ending in "OK(n) / ERROR(m)" and then stops
its own process with SIGTERM.
"""
import os
import sys

# The tester needs eventlet's hub (os-ken 4.x defaults to another one).
os.environ.setdefault("OSKEN_HUB_TYPE", "eventlet")

from os_ken import cfg  # noqa: E402
from os_ken import log  # noqa: E402  (registers the logging options)
from os_ken.base import app_manager  # noqa: E402


def main():
    log.early_init_log()
    cfg.CONF(args=sys.argv[1:], project="os_ken")
    log.init_log()
    app_manager.AppManager.run_apps(["os_ken.tests.switch.tester"])


if __name__ == "__main__":
    main()
