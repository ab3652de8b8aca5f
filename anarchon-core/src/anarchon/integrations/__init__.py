"""anarchon inside the frameworks users already run.

Each module needs its framework, installed with the matching extra; importing `anarchon` never
imports any of them:

- `anarchon.integrations.fastapi`: a lifespan and a readiness route (`anarchon[fastapi]`)
- `anarchon.integrations.django`: a Django app with settings, a management command and checks
  (`anarchon[django]`)
- `anarchon.integrations.celery`: a Celery beat scheduler that sends each entry once per slot
  across beat nodes (`anarchon[celery]`)
- `anarchon.integrations.apscheduler`: guarding APScheduler 3 jobs with `anarchon.once`
"""
