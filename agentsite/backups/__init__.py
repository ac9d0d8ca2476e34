"""Backups of a whole server: one archive with the database, the session workspaces and a manifest.

`archive` is the file format, `facts` what a manifest says about a database, `sqlite` and `postgres`
the two ways a database is copied out and back, `take` a backup, `restore` the way back, `verify`
the check that an archive is intact and restores. `manage.py backup` and `manage.py restore` wire them.
"""
