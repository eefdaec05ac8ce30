"""The runtime: devices (the mesh, processes of a cluster job) and the persistent compilation cache.

Modules: `devices`, `compile_cache`.
"""
