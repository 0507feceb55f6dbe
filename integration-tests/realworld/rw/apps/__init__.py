"""The applications the harness can run: name → App class."""
from .apache import Apache
from .mariadb import MariaDB
from .nginx import Nginx
from .postgres import Postgres

APPS = {"postgres": Postgres, "mariadb": MariaDB, "apache": Apache, "nginx": Nginx}
