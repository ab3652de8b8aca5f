"""The journal: what each process ran, written by the jobs through the ORM."""

from __future__ import annotations

from django.db import models


class Tick(models.Model):
    job = models.CharField(max_length=100)
    slot = models.BigIntegerField()
    attempt = models.IntegerField()
    pid = models.IntegerField()
    event = models.CharField(max_length=20)
    left_open = models.BooleanField()
    """The connection the job's previous run (in this process) used was still open when this
    run started: the integration failed to close it."""
    at = models.FloatField()
