"""Deployment cost profiles: what each model's forward step of B requests costs on a device (``spec``: the file
format, a table with interpolation per batch size), made by measuring this machine (``measure``) or from a roofline
of a device spec (``analytic``, ``devices``: the shipped ``profiles/devices.yaml``), resolved by name for a stored
run (``resolve``), and the proxy time of a stored generation on that device at the concurrency it was decoded at
(``proxy``): Xia et al.'s response-length-aware proxy speed, priced per round. The analysis turns proxy times into
proxy speed-ups exactly as it turns measured times into speed-ups."""

from relaxbench.profiles.proxy import ProxyTime, Unpriced, Work, proxy_time
from relaxbench.profiles.spec import Profile, load_profile, profile_from_mapping, write_profile

__all__ = ["Profile", "ProxyTime", "Unpriced", "Work", "load_profile", "profile_from_mapping", "proxy_time",
           "write_profile"]
