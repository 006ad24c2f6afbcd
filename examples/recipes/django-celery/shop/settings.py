"""Everything that differs between worlds comes from the environment Binky
gives every process of a world (binky.toml's [env])."""
import os
from urllib.parse import unquote, urlparse

db = urlparse(os.environ["DATABASE_URL"])

SECRET_KEY = "dev-only"
DEBUG = True
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "shop.urls"
USE_TZ = True
INSTALLED_APPS = ["orders"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# The world's database: ${db.url}.
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(db.path.lstrip("/")),
        "USER": unquote(db.username or ""),
        "PASSWORD": unquote(db.password or ""),
        "HOST": db.hostname or "",
        "PORT": str(db.port or ""),
    }
}

# The world's Redis prefix (${redis.prefix}, e.g. "shop:feat-a:"): every key
# this app writes starts with it, so `binky remove` finds and deletes them.
REDIS_PREFIX = os.environ["REDIS_PREFIX"]

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": os.environ["REDIS_URL"],
        "KEY_PREFIX": REDIS_PREFIX,
    }
}

# Celery: the broker is the world's vhost, the results are in Redis under
# the world's prefix.
CELERY_BROKER_URL = os.environ["CELERY_BROKER_URL"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_RESULT_BACKEND = os.environ["REDIS_URL"]
CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = {"global_keyprefix": REDIS_PREFIX}
