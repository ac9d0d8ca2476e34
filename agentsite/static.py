"""WhiteNoise, without a thread hop per request.

WhiteNoise's middleware is sync-only. Django then runs it, and SecurityMiddleware
before it, in a worker thread for every request, and hops back to the event
loop for the async middleware and views inside: two thread crossings per
request, streams included, before any view runs. This subclass is
async-capable: under ASGI a request that is not for a static file passes
through on the event loop. Static files are still served by WhiteNoise.
"""
from __future__ import annotations

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from whitenoise.middleware import WhiteNoiseMiddleware


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    sync_capable = True
    async_capable = True

    def __init__(self, get_response=None, settings=None):
        if settings is None:
            super().__init__(get_response)
        else:
            super().__init__(get_response, settings=settings)
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self.is_async:
            return self.__acall__(request)
        return super().__call__(request)

    async def __acall__(self, request):
        if not request.path_info.startswith(self.static_prefix):
            static_file = None  # the settings give WhiteNoise no other root
        elif self.autorefresh:  # development: a stat() per lookup, kept off the loop
            static_file = await sync_to_async(self.find_file, thread_sensitive=False)(request.path_info)
        else:
            static_file = self.files.get(request.path_info)
        if static_file is not None:
            return self.serve(static_file, request)
        return await self.get_response(request)
