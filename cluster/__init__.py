"""The top of Wonder's layers: wiring, Ray adapters, bootstrap and the ``wonder`` command.

Importing anything here first gives the process its Ray environment (``ray_environment``): Ray
reads its auth mode once, at its first import, so this must run before any module imports ray.
"""

from cluster.ray_environment import prepare

prepare()
