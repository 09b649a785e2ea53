"""`make lab`: JupyterLab on the lessons, for root and for headless machines too.

    python -m rdmalab.lab [JUPYTER LAB ARGUMENTS...]      (the Makefile: python -m rdmalab.lab notebooks/)

Runs `jupyter lab` with the arguments given, and says what it adds:
- it opens the first lesson (00-welcome) rather than the Launcher, asks no question about news and checks
  for no updates; it logs warnings only and prints, itself, the one URL to open (a token of its own
  choosing in it), so the terminal says what matters in a few lines;
- as root (a container, a cloud VM's default user): --allow-root, without which JupyterLab refuses to start;
- in the lab's container (container/Dockerfile): no browser, and where the URL is reached from;
- with no display, or in an SSH session: no browser, a port of its own choosing (8888 or the next free
  one), and the `ssh -L` command that reaches it from the learner's own machine;
- it trusts the lessons as shipped (Jupyter's notebook signatures), which the server otherwise warns of,
  one line for each lesson opened.
"""
import getpass
import glob
import os
import secrets
import socket
import sys

from rdmalab import settings, sockets

SAY = "[make lab]"
DEFAULT_PORT = 8888


def why_no_browser(env, platform=sys.platform):
    """Why no browser should be opened here, or None if one can be."""
    if settings.in_container(env):
        return "this is a container"
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


def served_folder(args):
    """The folder JupyterLab is told to serve: its first argument, or --ServerApp.root_dir / --notebook-dir."""
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in ("--ServerApp.root_dir", "--notebook-dir", "--ServerApp.notebook_dir"):
            return value if eq else (args[i + 1:] or [None])[0]
    return next((a for a in args if not a.startswith("-")), None)


def first_lesson(args):
    """The first lesson's notebook name, if the folder JupyterLab serves holds the lessons."""
    folder = served_folder(args)
    found = sorted(glob.glob(os.path.join(folder, "00-*.ipynb"))) if folder else []
    return os.path.basename(found[0]) if found else None


def reachable_address():
    """This machine's address on its main network (the route a packet would take out), or None."""
    try:
        address = sockets.address_toward("192.0.2.1")   # (TEST-NET-1: routed, and nothing is sent)
        return None if address.startswith("127.") else address
    except OSError:
        return None


def given(args, *names):
    return any(a.split("=")[0] in names for a in args)


def plan(args, euid, env, pick_port=free_port, address=reachable_address):
    """The command line that starts JupyterLab, and the lines to print first."""
    added, said = [], []
    if euid == 0:
        added.append("--allow-root")
        said.append("running as root, so passing --allow-root: JupyterLab refuses to start as root without it "
                    "(the lessons' code then runs as root too)")
    page = "lab"
    lesson = first_lesson(args)
    if lesson:   # open the first lesson, not the Launcher
        page = f"lab/tree/{lesson}"
        added.append(f"--LabApp.default_url=/{page}")
    added += ["--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if not given(args, "--ServerApp.tornado_settings"):
        # No keep-alive pings on the kernels' websockets. jupyter_server checks a ping's pong only when it sends
        # the next, and gives up if the pong is older than ws_ping_timeout: with its default (three intervals)
        # tornado warns when the first kernel connects, and with one interval there is no slack at all, so a
        # server whose loop ran a few ms late (lesson 09 starting clusters of 4 ranks on 2 CPUs) closed the
        # page's kernel connection ("WebSocket ping timeout"). A lab on this machine, or through ssh -L, needs
        # no keep-alive: the kernels' own messages keep the connection busy
        added.append('--ServerApp.tornado_settings={"ws_ping_interval": 0}')
    if not given(args, "--log-level", "--ServerApp.log_level", "--Application.log_level"):
        added += ["--log-level=WARN", "--LabApp.log_level=WARN"]   # (its startup INFO lines: the URL is printed here)
    token = None
    if not given(args, "--IdentityProvider.token", "--ServerApp.token", "--NotebookApp.token"):
        token = secrets.token_hex(24)
        added.append(f"--IdentityProvider.token={token}")
    port = given_port(args, env)
    if not port:   # JupyterLab would take 8888 or the next free port: take it here, to print it
        port = pick_port()
        added += [f"--ServerApp.port={port}", "--ServerApp.port_retries=0"]
    url = f"http://localhost:{port}/{page}" + (f"?token={token}" if token else "")
    why = why_no_browser(env)
    if why:
        added.append("--no-browser")
    if why == "this is a container":
        said.append(f"{why}: open the URL below on your own machine, where `docker run -p 127.0.0.1:{port}:{port}` "
                    f"publishes the port (published as another port? put that one in the URL)")
    elif why:
        ssh = env.get("SSH_CONNECTION", "").split()   # client address and port, this server's address and port
        host = ssh[2] if len(ssh) == 4 else address()
        said.append(f"{why}, so not opening a browser. From your own machine: "
                    f"ssh -L {port}:localhost:{port} {getpass.getuser()}@{host or '<this machine>'}"
                    + ("" if host else " (put the address you use to reach this machine there)"))
    said.append(f"open {url}   (Ctrl-C here stops JupyterLab)")
    return [sys.executable, "-m", "jupyterlab", *added, *args], said


# What `make` writes into the lab's venv once (python -m rdmalab.lab --configure), so that the terminal stays
# quiet: kernels log errors only (each one had warned that it talks TCP on this machine's loopback), and
# ipyparallel's JupyterLab panel and its server extension, which the lessons do not use (the extension
# warns of a deprecated hook at every start, and the panel without it opens an error dialog), are off.
# (A server setting other than jpserver_extensions in that folder is not read: plan() passes those.)
OURS = os.path.join("etc", "jupyter", "jupyter_server_config.d", "zz-rdmalab.json")   # rewritten every time
QUIET = {
    os.path.join("etc", "ipython", "ipython_kernel_config.py"): 'c.IPKernelApp.log_level = "ERROR"\n',
    OURS: '{"ServerApp": {"jpserver_extensions": {"ipyparallel": false}}}\n',
    os.path.join("etc", "jupyter", "labconfig", "page_config.json"):
        '{"disabledExtensions": {"ipyparallel-labextension": true}}\n',
    # JupyterLab 4 asks every new learner whether to fetch Jupyter's news (--LabApp.news_url=None does not
    # stop the question): the settings' defaults say no, and no update check
    os.path.join("share", "jupyter", "lab", "settings", "overrides.json"):
        '{"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false}}\n',
}


def configure(prefix=sys.prefix):
    """Write QUIET's files under `prefix` (the venv): ours always, the others only where none exists (someone's
    own settings are left alone)."""
    for relative, text in QUIET.items():
        path = os.path.join(prefix, relative)
        if os.path.exists(path) and relative != OURS:
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


def trust_lessons(folder, notary=None):
    """Sign every notebook in `folder` as trusted (as `jupyter trust` does), unless it is already: the
    lessons as shipped. Returns how many it signed."""
    import nbformat
    from nbformat.sign import NotebookNotary
    notary = notary or NotebookNotary()
    signed = 0
    for path in sorted(glob.glob(os.path.join(folder, "*.ipynb"))):
        notebook = nbformat.read(path, as_version=4)
        if not notary.check_signature(notebook):
            notary.sign(notebook)
            signed += 1
    return signed


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--configure"]:
        configure()
        return
    try:
        configure()   # (again: a venv made before a change to QUIET gets it too)
    except OSError:   # a Python this user cannot write to: JupyterLab runs as it is, only less quiet
        pass
    command, said = plan(argv, os.geteuid(), os.environ)
    if first_lesson(argv):
        trust_lessons(served_folder(argv))
    for line in said:
        print(SAY, line, file=sys.stderr, flush=True)
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
