"""Task data: rows read from a hub dataset, a wheel's data file or a local file (load), or made by a seeded
generator (generate), turned into items by a row format (formats). Importing the package registers every built-in
format and generator."""

from relaxbench.data import formats, gpqa, livecodebench, niah, spec_bench, speed_bench  # noqa: F401  (registration)
from relaxbench.data.items import TaskItem
from relaxbench.data.load import fingerprint, hub_file_rows, hub_rows, package_rows, read_records

__all__ = ["TaskItem", "fingerprint", "hub_file_rows", "hub_rows", "package_rows", "read_records"]
