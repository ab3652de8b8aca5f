"""The runtime: what runs jobs, built on the contract (`anarchon.abc`, `anarchon.backend`).

A backend needs none of it; ``import anarchon.backend`` loads no module of this package. Read in
the order a claim travels:

- `scheduler`: `Scheduler`, the public face: jobs, settings, start and stop, health.
- `settings`: `Settings` from code, TOML and ``ANARCHON_*`` variables.
- `opening`: opening the store at start, and in the background after a degraded start.
- `jobs`: `JobSpec`, a job as the runtime knows it, checked against its store.
- `cron` and `cron_fields`: `Schedule`, the slots of a cron expression in a time zone;
  `interval`: `Interval`, the slots of ``every=`` (aligned to the epoch).
- `timetable`: which slot of which job is due next (T2, T5, T6).
- `catch_up`: what becomes of slots reached late (T6).
- `dispatcher`: fires the due slots, claims them, keeps lanes of late slots, backs up holders.
- `claimer`: sends one claim or a batch, resending with the same token (C2, C3).
- `store_health`: whether the store answers; outages logged once.
- `running`: the runs won here, from their start to the shutdown.
- `execution`: one won run: heartbeats, self-fencing (F1), finish, release.
- `handle`: `Run`, the handle a job function receives.
- `clock` and `clock_watch`: the store-corrected clock (T2), and steps of the store's clock (F1).
- `health` and `snapshot`: `Health` and the probe endpoint.
- `context`: `RuntimeContext`, what all of these share.
- `once`: `anarchon.once()`, the claim alone; `shared_stores`: its store per URL in sync code.
- `background`: `LoopThread`, an event loop in a thread, for sync code; `in_thread`: a
  scheduler started from sync code (`start()`, `shutdown()`), forks and interpreter exit.
"""
