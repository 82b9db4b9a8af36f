"""tools/plotlib.py - what the plotting tools share: finding matplotlib.

need_matplotlib(tool) returns pyplot with the Agg backend (PNG files, no
display). When the interpreter running the tool has no matplotlib and
/usr/bin/python3 (where Debian's python3-matplotlib, from `make deps`,
lives) is another one, the tool is run again with that one; otherwise it
exits naming the package.
"""
import os
import sys


def need_matplotlib(tool):
    try:
        import matplotlib
    except ImportError:
        system = "/usr/bin/python3"
        if os.path.realpath(sys.executable) != os.path.realpath(system) and os.path.exists(system) \
                and not os.environ.get("CNT_PLOT_REEXEC"):
            os.environ["CNT_PLOT_REEXEC"] = "1"
            os.execv(system, [system] + sys.argv)
        sys.exit(f"{tool}: matplotlib not found (apt-get install python3-matplotlib, or make deps)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt
