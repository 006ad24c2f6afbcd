import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")

app = Celery("shop")
# Every CELERY_* setting in shop/settings.py.
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
