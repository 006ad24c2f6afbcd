// API_ORIGIN is ${api.local_url}: http://localhost:<this world's API port>,
// set by binky.toml. The dev server forwards /api there.
export default {
  server: {
    proxy: {
      "/api": { target: process.env.API_ORIGIN, changeOrigin: true },
    },
  },
};
