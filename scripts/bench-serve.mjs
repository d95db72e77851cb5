#!/usr/bin/env node
// Load generator for an OpenAI-compatible server (shardlm serve, llama-server):
// N clients each send streamed /v1/completions requests back to back until R
// requests are done; prints aggregate generated tok/s, time to first token
// and inter-token latency percentiles (ms).
// Usage: node scripts/bench-serve.mjs --url http://127.0.0.1:8080 --clients 4 --prompt 64 --gen 32 --requests 16 [--label NAME]
const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1]]);
  return acc;
}, []));
for (const k of ['url', 'clients', 'prompt', 'gen', 'requests'])
  if (!args[k]) { console.error(`bench-serve: --${k} is required`); process.exit(2); }
const clients = +args.clients, promptWords = +args.prompt, gen = +args.gen, total = +args.requests;
const words = ['the', 'little', 'dog', 'ran', 'to', 'a', 'big', 'park', 'and', 'saw', 'one', 'red', 'ball'];

async function oneRequest(i) {
  const prompt = Array.from({ length: promptWords }, (_, k) => words[(k * 7 + i * 3) % words.length]).join(' ');
  const t0 = performance.now();
  const res = await fetch(`${args.url}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${args.key ?? 'none'}` },
    body: JSON.stringify({ prompt, max_tokens: gen, temperature: 0, stream: true, stream_options: { include_usage: true } }),
  });
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const times = [];
  let tokens = 0, buf = '';
  const decoder = new TextDecoder();
  for await (const part of res.body) {
    buf += decoder.decode(part, { stream: true });
    let at;
    while ((at = buf.indexOf('\n\n')) >= 0) {
      const line = buf.slice(0, at).trim();
      buf = buf.slice(at + 2);
      if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
      const j = JSON.parse(line.slice(6));
      if (j.usage?.completion_tokens) tokens = j.usage.completion_tokens;
      if (j.choices?.[0]?.text) times.push(performance.now());
    }
  }
  return { ttft: times.length ? times[0] - t0 : NaN, itl: times.slice(1).map((t, k) => t - times[k]), tokens: tokens || times.length };
}

const pct = (xs, p) => {
  const s = [...xs].filter((x) => !Number.isNaN(x)).sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor(p / 100 * s.length))] : NaN;
};

let next = 0;
const results = [];
const t0 = performance.now();
await Promise.all(Array.from({ length: clients }, async () => {
  while (next < total) results.push(await oneRequest(next++));
}));
const seconds = (performance.now() - t0) / 1000;
const tokens = results.reduce((s, r) => s + r.tokens, 0);
const ttft = results.map((r) => r.ttft), itl = results.flatMap((r) => r.itl);
console.log(JSON.stringify({
  label: args.label ?? args.url, clients, prompt_words: promptWords, gen, requests: total,
  tok_per_s: +(tokens / seconds).toFixed(2), ttft_p50_ms: +pct(ttft, 50).toFixed(1), ttft_p99_ms: +pct(ttft, 99).toFixed(1),
  itl_p50_ms: +pct(itl, 50).toFixed(1), itl_p99_ms: +pct(itl, 99).toFixed(1),
}));
