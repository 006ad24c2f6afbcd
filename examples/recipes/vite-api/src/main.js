// Same origin: the dev server forwards /api to this world's API.
const answer = await fetch("/api/hello").then((r) => r.json());

// The API's own URL, for code that calls it directly (the API must then
// allow this origin). Vite puts VITE_* variables of its environment here.
const direct = import.meta.env.VITE_API_URL;

document.querySelector("#app").textContent = JSON.stringify({ answer, direct }, null, 2);
