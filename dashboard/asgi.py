import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs the apps loaded above)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from dashboard.origin import SiteOriginValidator  # noqa: E402
from experiments.live.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": SiteOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)

# What is loaded by now (Django, the apps, every module) lives as long as the process. Frozen, it is left out of
# the collector's full passes, which the big pages trigger several times per request: the comparison page of
# bench/comparison_page.py spends ~60 ms less per request.
gc.freeze()
