"""HTTP plumbing around the routes: the connection protocol and its limits (``protocol``), the graceful
drain before a shutdown (``drain``), and the middleware (request ``limits``, read-key ``auth``, the answer
``cache``, ``metrics``, ``HEAD`` answered as ``GET`` by ``head``), plus the direct handler of the hot GET routes
(``fastroute``). None of it knows about tables or searches."""
