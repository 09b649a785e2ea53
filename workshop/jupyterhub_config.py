# JupyterHub for a class on one server: local Unix users, the lessons copied at first login, per-learner
# limits and soft0 room (workshop/rdmalab_class.py). Every setting comes from the environment, with the
# defaults workshop/setup.sh installs (workshop/README.md lists them); tests/workshop runs this same file.
#   jupyterhub -f workshop/jupyterhub_config.py
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rdmalab_class import ClassSpawner, Settings

c = get_config()  # noqa: F821  (JupyterHub's config loader provides it)
s = Settings()
os.makedirs(s.state, mode=0o700, exist_ok=True)

c.JupyterHub.bind_url = s.url
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = s.hub_port
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{s.proxy_api_port}"
c.ConfigurableHTTPProxy.command = [s.proxy]
c.ConfigurableHTTPProxy.pid_file = os.path.join(s.state, "proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{os.path.join(s.state, 'jupyterhub.sqlite')}"
c.JupyterHub.cookie_secret_file = os.path.join(s.state, "jupyterhub_cookie_secret")
c.JupyterHub.cleanup_servers = True          # the hub's stop stops every learner's server (and cleans up)

# Who may log in: local Unix users (PAM) in the class's group; the instructors are admins.
c.JupyterHub.authenticator_class = "pam"
c.LocalAuthenticator.allowed_groups = {s.group}
c.Authenticator.admin_users = set(s.admins)

# Each learner's server: the shared, read-only lab venv; the lessons in ~/rdmalab-lessons.
c.JupyterHub.spawner_class = ClassSpawner
c.Spawner.cmd = [os.path.join(s.venv, "bin", "python"), "-m", "jupyterhub.singleuser"]
c.Spawner.env_keep = ["LANG", "LC_ALL"]
c.Spawner.default_url = "/lab/tree/rdmalab-lessons/00-welcome.ipynb"
c.Spawner.notebook_dir = "~"
c.Spawner.start_timeout = 180                 # a room of learners logging in at once, on few cores
c.Spawner.http_timeout = 180
c.Spawner.poll_interval = 10                  # a dead server is noticed (and cleaned up) within seconds
c.Spawner.mem_limit = s.memory                # shown to the learner (JUPYTERHUB_MEM_LIMIT); the cgroup enforces
c.Spawner.cpu_limit = s.cpus

# An instructor's token for scripts (start every server before class, tests/workshop): optional.
if s.admin_token:
    c.JupyterHub.services = [{"name": "class-admin", "api_token": s.admin_token}]
    c.JupyterHub.load_roles = [{"name": "class-admin", "services": ["class-admin"],
                                "scopes": ["admin:users", "admin:servers", "access:servers", "list:users"]}]
