"""HTTP plumbing around the routes: the connection protocol and its limits (``protocol``), a response's head and
body in one write (``one_write``), the graceful drain before a shutdown (``drain``), the middleware (the request's
``request_id``, the unexpected error's log line in ``logged_once``, ``metrics``, OpenAI's error shape in
``openai_errors``, request ``limits``, ``cors``, read-key ``auth``, the answer ``cache``, ``HEAD`` answered as
``GET`` by ``head``, undeclared query parameters refused by ``declared_query``, the trailing-slash redirect in
``slashes``, the hot routes reached without the router in ``known_routes``), the hot routes' own handler
(``fastroute``) and the app's state (``app_state``). None of it imports the engine's tables, the registry,
``service.execute`` or the routers (``tests/test_layout_rules.py``)."""
