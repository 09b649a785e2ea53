"""`make lab`: JupyterLab on the lessons, for root and for headless machines too.

    python -m rdmalab.lab [JUPYTER LAB ARGUMENTS...]      (the Makefile: python -m rdmalab.lab notebooks/)

Runs `jupyter lab` with the arguments given, and says what it adds:
- as root (a container, a cloud VM's default user): --allow-root, without which JupyterLab refuses to start;
- with no display, or in an SSH session: no browser, a port of its own choosing (8888 or the next free
  one), and the URL to open and the `ssh -L` command that reaches it from the learner's own machine.
"""
import getpass
import os
import socket
import sys

SAY = "[make lab]"
DEFAULT_PORT = 8888


def why_no_browser(env, platform=sys.platform):
    """Why no browser should be opened here, or None if one can be."""
    if env.get("SSH_CONNECTION") or env.get("SSH_CLIENT"):
        return "this is an SSH session"
    if platform not in ("darwin", "win32") and not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")):
        return "no display here (no DISPLAY or WAYLAND_DISPLAY)"
    return None


def given_port(args, env):
    """The port asked for with --port / --ServerApp.port (or JUPYTER_PORT), else None."""
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in ("--port", "--ServerApp.port"):
            value = value if eq else (args[i + 1:] or [""])[0]
            return int(value) if value.isdigit() else None   # not a number: JupyterLab will say so
    return int(env["JUPYTER_PORT"]) if env.get("JUPYTER_PORT", "").isdigit() else None


def free_port(start=DEFAULT_PORT, tries=50):
    """The first port from `start` that nothing listens on (JupyterLab's own choice, made here so it can be printed)."""
    for port in range(start, start + tries):
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as JupyterLab binds: TIME_WAIT is free
            try:
                probe.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise SystemExit(f"{SAY} ports {start}-{start + tries - 1} are all in use: choose one with --port")


def plan(args, euid, env, pick_port=free_port):
    """The command line that starts JupyterLab, and the lines to print first."""
    added, said = [], []
    if euid == 0:
        added.append("--allow-root")
        said.append("running as root, so passing --allow-root: JupyterLab refuses to start as root without it "
                    "(the lessons' code then runs as root too)")
    why = why_no_browser(env)
    if why:
        added.append("--no-browser")
        port = given_port(args, env)
        if not port:   # JupyterLab would take 8888 or the next free port: take it here, to print it
            port = pick_port()
            added += [f"--ServerApp.port={port}", "--ServerApp.port_retries=0"]
        ssh = env.get("SSH_CONNECTION", "").split()   # client address and port, this server's address and port
        host = ssh[2] if len(ssh) == 4 else socket.gethostname()
        said += [f"{why}, so not opening a browser; JupyterLab will be at http://localhost:{port}/lab "
                 "(its full URL, with ?token=, is printed below)",
                 f"to open it from your own machine: ssh -L {port}:localhost:{port} {getpass.getuser()}@{host}"
                 ", then open that URL in your browser there"]
    return [sys.executable, "-m", "jupyterlab", *added, *args], said


def main(argv=None):
    command, said = plan(sys.argv[1:] if argv is None else argv, os.geteuid(), os.environ)
    for line in said:
        print(SAY, line, file=sys.stderr, flush=True)
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
