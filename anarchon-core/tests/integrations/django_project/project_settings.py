"""Settings of the test project, pointed by test_django.py at its own files and stores:

- ``TEST_DJANGO_DB``: the SQLite file of the project's database (the `ticks` journal);
- ``TEST_DJANGO_ANARCHON``: ``settings.ANARCHON`` as JSON (absent: the setting is not set);
- ``TEST_DJANGO_JOBS``: which jobs ``ticks/anarchon_jobs.py`` declares (comma-separated).
"""

from __future__ import annotations

import json
import os

SECRET_KEY = "test-only-not-secret"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["anarchon.integrations.django", "ticks"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("TEST_DJANGO_DB", ":memory:"),
        # Two processes write the journal: wait for the other's lock instead of failing.
        "OPTIONS": {"timeout": 30},
        # Each run must leave no connection behind (what the integration's wrapper ensures).
        "CONN_MAX_AGE": 0,
    }
}

if "TEST_DJANGO_ANARCHON" in os.environ:
    ANARCHON = json.loads(os.environ["TEST_DJANGO_ANARCHON"])
