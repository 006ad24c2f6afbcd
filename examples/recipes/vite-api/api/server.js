// The API. Binky gives it its port in $PORT and its world in $BINKY_WORLD.
import http from "node:http";

const world = process.env.BINKY_WORLD;

const server = http.createServer((req, res) => {
  const url = new URL(req.url, "http://api");
  if (url.pathname === "/api/health") {
    res.end("ok");
  } else if (url.pathname === "/api/hello") {
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify({ from: "api", world }));
  } else {
    res.statusCode = 404;
    res.end("not found");
  }
});

server.listen(Number(process.env.PORT), "127.0.0.1");
