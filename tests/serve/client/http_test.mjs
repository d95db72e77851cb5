// Starts `shardlm serve` on a free loopback port and drives it with the
// official openai client and raw fetch: chat and completions, streamed and
// whole, the models list, typed client errors, a table of malformed bodies
// and headers (JSON nested too deep among them), a chunked body over the size
// limit, a second server on the port in use, metrics, and a client that
// disconnects mid-stream.
// Usage: node http_test.mjs SHARDLM_BINARY MODEL.gguf [tp2|pp2]
// With a layout, `serve --nodes` runs on two local workers (started here);
// then greedy outputs must equal a single-node server's, clients that leave
// a whole answer or their place in the queue must free it, and last, a worker
// killed with SIGKILL under four active streams ends each with an error
// naming it within 2 s while the server stays up and says it is degraded;
// the next request is served on the remaining worker (the job formed again
// without the dead one), and once the dead worker is back and the other dies,
// on the returned one, all without restarting the server.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, basename } from 'node:path';
import OpenAI from 'openai';

const [binary, modelPath, layout] = process.argv.slice(2);
const KEY = 'test-key-123';
const tmp = mkdtempSync(join(tmpdir(), 'shardlm-serve-'));
const keyFile = join(tmp, 'keys');
writeFileSync(keyFile, `# test keys\n${KEY}\n`);
const MODEL = basename(modelPath);
const TOKEN_ENV = { ...process.env, SHARDLM_TOKEN: 'serve-test-token' };

// A worker daemon in a process group of its own (its job process dies with it); resolves to "127.0.0.1:port".
async function startWorker(i) {
  const portFile = join(tmp, `port${i}`);
  const child = spawn(binary, ['worker', '--listen', '127.0.0.1:0', '--port-file', portFile, '--probe-mib', '1'],
    { stdio: ['ignore', 'ignore', 'ignore'], detached: true,
      env: { ...TOKEN_ENV, SHARDLM_WORKER_TOKEN_DELAY_MS: '10' } });
  for (let tries = 0; tries < 500 && !existsSync(portFile); ++tries) await new Promise((r) => setTimeout(r, 20));
  const port = readFileSync(portFile, 'utf8').trim();
  return { child, address: `127.0.0.1:${port}` };
}
const workers = layout ? [await startWorker(0), await startWorker(1)] : [];
const layoutArgs = { tp2: ['--tp', '2', '--pp', '1'], pp2: ['--tp', '1', '--pp', '2'] };
if (layout && !layoutArgs[layout]) throw new Error(`unknown layout ${layout}: tp2 or pp2`);
const clusterArgs = layout ? ['--nodes', workers.map((w) => w.address).join(','), ...layoutArgs[layout]] : [];

const PAGE_ORIGIN = 'https://chat.example.org';  // the one origin --cors lets in

function startServer(extra = clusterArgs) {
  const child = spawn(binary, ['serve', '-m', modelPath, '--port', '0', '--parallel', '4', '-c', '256', '-t', '1',
    '--api-key-file', keyFile, '--max-body', '65536', '--prefill-budget', '32', '--cors', PAGE_ORIGIN, ...extra],
    { stdio: ['ignore', 'pipe', 'inherit'], env: TOKEN_ENV });
  return new Promise((resolve, reject) => {
    let out = '';
    child.on('exit', (code) => reject(new Error(`shardlm serve exited with ${code}: ${out}`)));
    child.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/http:\/\/[\d.]+:(\d+)/);
      if (m) resolve({ child, base: `http://127.0.0.1:${m[1]}` });
    });
  });
}

const tests = [];
const test = (name, fn) => tests.push({ name, fn });

const { child, base } = await startServer();
const client = new OpenAI({ apiKey: KEY, baseURL: `${base}/v1`, maxRetries: 0, timeout: 20000 });
const userMessages = [{ role: 'user', content: 'Once upon a time' }];

async function raw(path, { method = 'POST', body, headers = {}, signal } = {}) {
  const res = await fetch(base + path, {
    method, body, signal,
    headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json', ...headers },
  });
  const text = await res.text();
  return { status: res.status, text };
}

// A POST whose body goes in chunks (Transfer-Encoding: chunked), one per piece.
function postChunked(path, pieces) {
  return new Promise((resolve, reject) => {
    const req = http.request(base + path, { method: 'POST',
      headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' } }, (res) => {
      let text = '';
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, text }));
    });
    req.on('error', reject);
    for (const p of pieces) req.write(p);
    req.end();
  });
}

// Polls `probe` every 50 ms until it holds, for at most `ms`; whether it did.
async function within(ms, probe) {
  for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, 50)))
    if (await probe()) return true;
  return probe();
}
const slotsBusy = async () => JSON.parse((await raw('/health', { method: 'GET' })).text).slots_processing;
const requestsWaiting = async () => Number((await raw('/metrics', { method: 'GET' })).text.match(/^shardlm_requests_waiting (\d+)/m)[1]);

async function streamText(stream) {
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta ? (c.delta.content ?? '') : c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish, usage };
}

test('models list', async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [MODEL]);
  assert.equal((await client.models.retrieve(MODEL)).id, MODEL);
  await assert.rejects(client.models.retrieve('other-model'), (e) => e instanceof OpenAI.NotFoundError && e.message.includes('other-model'));
});

test('chat: whole and streamed agree, usage and cached tokens', async () => {
  const whole = await client.chat.completions.create({ model: MODEL, messages: userMessages, max_tokens: 16, temperature: 0 });
  const msg = whole.choices[0];
  assert.equal(msg.message.role, 'assistant');
  assert.ok(msg.message.content.length > 0);
  assert.equal(msg.finish_reason, 'length');
  assert.equal(whole.usage.completion_tokens, 16);
  assert.ok(whole.usage.prompt_tokens > 4);
  const stream = await client.chat.completions.create({ model: MODEL, messages: userMessages, max_tokens: 16,
    temperature: 0, stream: true, stream_options: { include_usage: true } });
  const s = await streamText(stream);
  assert.equal(s.text, msg.message.content);
  assert.equal(s.finish, 'length');
  assert.equal(s.usage.completion_tokens, 16);
  assert.equal(s.usage.prompt_tokens_details.cached_tokens, whole.usage.prompt_tokens - 1, 'the same prompt again reuses its prefix');
});

test('completions: text and token-id prompts, streamed, stop strings', async () => {
  const a = await client.completions.create({ model: MODEL, prompt: 'The little dog', max_tokens: 24, temperature: 0 });
  const full = a.choices[0].text;
  assert.ok(full.length > 20, full);
  const s = await streamText(await client.completions.create({ model: MODEL, prompt: 'The little dog', max_tokens: 24,
    temperature: 0, stream: true }));
  assert.equal(s.text, full);
  const stop = full.slice(10, 15);
  const b = await client.completions.create({ model: MODEL, prompt: 'The little dog', max_tokens: 24, temperature: 0, stop: [stop] });
  assert.equal(b.choices[0].text, full.slice(0, full.indexOf(stop)));
  assert.equal(b.choices[0].finish_reason, 'stop');
  const ids = await client.completions.create({ model: MODEL, prompt: [1, 100, 200], max_tokens: 4, temperature: 0 });
  assert.equal(ids.usage.prompt_tokens, 3);
  assert.equal(ids.usage.completion_tokens, 4);
  // One prompt alone in a list, as the OpenAI clients' batch form has it.
  const listed = await client.completions.create({ model: MODEL, prompt: [[1, 100, 200]], max_tokens: 4, temperature: 0 });
  assert.equal(listed.choices[0].text, ids.choices[0].text);
  await assert.rejects(client.completions.create({ model: MODEL, prompt: [[1, 100], [1, 200]], max_tokens: 4 }),
    (e) => e.status === 400 && e.message.includes('one prompt per request'));
});

// Checks one chat logprobs entry: bytes are the token's UTF-8, top list sorted, greedy pick first.
function checkChatEntry(e, nTop) {
  assert.equal(typeof e.token, 'string');
  assert.ok(e.logprob <= 0, JSON.stringify(e));
  if (!e.token.includes('\uFFFD')) assert.deepEqual(e.bytes, [...Buffer.from(e.token, 'utf8')]);
  assert.equal(e.top_logprobs.length, nTop);
  for (let i = 1; i < e.top_logprobs.length; ++i) assert.ok(e.top_logprobs[i].logprob <= e.top_logprobs[i - 1].logprob);
  if (nTop > 0) {
    assert.equal(e.top_logprobs[0].token, e.token, 'a greedy pick is the most likely');
    assert.equal(e.top_logprobs[0].logprob, e.logprob);
  }
}

async function chatLogprobs(c, stream) {
  const body = { model: MODEL, messages: userMessages, max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 3 };
  if (!stream) {
    const r = await c.chat.completions.create(body);
    return { text: r.choices[0].message.content, content: r.choices[0].logprobs.content, tokens: r.usage.completion_tokens };
  }
  let text = '';
  const content = [];
  for await (const chunk of await c.chat.completions.create({ ...body, stream: true })) {
    for (const ch of chunk.choices) {
      text += ch.delta.content ?? '';
      if (ch.logprobs) content.push(...ch.logprobs.content);
    }
  }
  return { text, content };
}

const closeLogprobs = (a, b, what) => {
  assert.deepEqual(a.map((e) => e.token), b.map((e) => e.token), what);
  a.forEach((e, i) => assert.ok(Math.abs(e.logprob - b[i].logprob) <= 1e-4, `${what}: ${e.logprob} vs ${b[i].logprob}`));
};

test('logprobs: chat whole and streamed, completions in the legacy form, greedy text unchanged', async () => {
  const plain = await client.chat.completions.create({ model: MODEL, messages: userMessages, max_tokens: 12, temperature: 0 });
  const whole = await chatLogprobs(client, false);
  assert.equal(whole.text, plain.choices[0].message.content, 'logprobs changed the greedy text');
  assert.equal(whole.content.length, whole.tokens);
  for (const e of whole.content) checkChatEntry(e, 3);
  assert.ok(whole.content.map((e) => e.token).join('').includes(whole.text.slice(1)));
  const streamed = await chatLogprobs(client, true);
  assert.equal(streamed.text, whole.text);
  closeLogprobs(streamed.content, whole.content, 'streamed vs whole');

  const body = { model: MODEL, prompt: 'The little dog', max_tokens: 10, temperature: 0, logprobs: 2 };
  const c = await client.completions.create(body);
  const lp = c.choices[0].logprobs;
  assert.equal(lp.tokens.length, c.usage.completion_tokens);
  assert.equal(lp.token_logprobs.length, lp.tokens.length);
  assert.equal(lp.text_offset[0], 0);
  for (let i = 0; i < lp.tokens.length; ++i) {
    assert.ok(lp.token_logprobs[i] <= 0);
    assert.ok(Object.keys(lp.top_logprobs[i]).length <= 2 && Object.keys(lp.top_logprobs[i]).length >= 1);
    if (i > 0) assert.equal(lp.text_offset[i], lp.text_offset[i - 1] + [...lp.tokens[i - 1]].length);  // characters
  }
  let tokens = [];
  for await (const chunk of await client.completions.create({ ...body, stream: true }))
    for (const ch of chunk.choices) if (ch.logprobs) tokens.push(...ch.logprobs.tokens);
  assert.deepEqual(tokens, lp.tokens);
  await assert.rejects(client.completions.create({ ...body, logprobs: 30 }),
    (e) => e instanceof OpenAI.BadRequestError && e.message.includes('logprobs'));
});

test('concurrent greedy streams equal the same requests one at a time', async () => {
  const prompts = ['Lily went', 'The sun', 'Tom had a ball', 'A big bird', 'Mom said', 'The cat'];
  const one = (p) => client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: p }],
    max_tokens: 20, temperature: 0, stream: true }).then(streamText);
  const alone = [];
  for (const p of prompts) alone.push(await one(p));
  const together = await Promise.all(prompts.map(one));
  assert.deepEqual(together.map((r) => r.text), alone.map((r) => r.text));
});

test('n choices: one per seed, indexed, the prompt counted once; streamed alike', async () => {
  const body = { model: MODEL, messages: userMessages, max_tokens: 12, temperature: 1, seed: 7 };
  const three = await client.chat.completions.create({ ...body, n: 3 });
  assert.deepEqual(three.choices.map((c) => c.index), [0, 1, 2]);
  const texts = three.choices.map((c) => c.message.content);
  for (let i = 0; i < 3; ++i) {
    const alone = await client.chat.completions.create({ ...body, seed: 7 + i });
    assert.equal(texts[i], alone.choices[0].message.content, `choice ${i} is the request with seed ${7 + i}`);
  }
  const one = await client.chat.completions.create(body);
  assert.equal(three.usage.prompt_tokens, one.usage.prompt_tokens);
  assert.equal(three.usage.completion_tokens, three.choices.length * 12);
  const stream = await client.chat.completions.create({ ...body, n: 3, stream: true, stream_options: { include_usage: true } });
  const streamed = ['', '', ''];
  const finished = [];
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      streamed[c.index] += c.delta?.content ?? '';
      if (c.finish_reason) finished.push(c.index);
    }
  }
  assert.deepEqual(streamed, texts);
  assert.deepEqual(finished.sort(), [0, 1, 2]);
  assert.equal(usage.completion_tokens, 36);
});

test('typed client errors', async () => {
  const bad = new OpenAI({ apiKey: 'wrong', baseURL: `${base}/v1`, maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  await assert.rejects(client.chat.completions.create({ model: 'no-such-model', messages: userMessages, max_tokens: 2 }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found' && e.param === 'model');
  const cases = [
    [{ n: 0 }, 'n'],
    [{ max_tokens: 0 }, 'max_tokens'],
    [{ repeat_penalty: 0 }, 'repeat_penalty'],
    [{ typical_p: 0.5 }, 'typical_p'],
    [{ mirostat: 2 }, 'mirostat'],
    [{ top_logprobs: 2 }, 'top_logprobs'],
    [{ logprobs: true, top_logprobs: 21 }, 'top_logprobs'],
    [{ temperature: 'hot' }, 'temperature'],
    [{ messages: [{ role: 'user', content: 'dog '.repeat(400) }] }, 'messages'],
    // What cannot be honoured is refused, not ignored.
    [{ response_format: { type: 'json_object' } }, 'response_format'],
    [{ logit_bias: { 42: 500 } }, 'logit_bias'],
    [{ logit_bias: { dog: 1 } }, 'logit_bias'],
    [{ logit_bias: { '+5': 1 } }, 'logit_bias'],
    [{ logit_bias: { 100000: 1 } }, 'logit_bias'],
    [{ logit_bias: [[42, 1]] }, 'logit_bias'],
    [{ tool_choice: 'required' }, 'tool_choice'],
  ];
  for (const [override, field] of cases) {
    await assert.rejects(client.chat.completions.create({ model: MODEL, messages: userMessages, max_tokens: 2, ...override }),
      (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.message.includes(field),
      `${JSON.stringify(override).slice(0, 60)} → 400 naming ${field}`);
  }
});

test('logit_bias moves the choice, as on one machine', async () => {
  const body = { model: MODEL, prompt: 'Once upon a time', max_tokens: 5, temperature: 0, logprobs: 0 };
  const plain = await client.completions.create(body);
  const forced = await client.completions.create({ ...body, logit_bias: { 400: 100 } });
  const tokens = forced.choices[0].logprobs.tokens;
  assert.equal(tokens.length, 5);
  assert.ok(tokens.every((t) => t === tokens[0]), JSON.stringify(tokens));
  assert.notDeepEqual(tokens, plain.choices[0].logprobs.tokens);
  // Banned, token 400 never comes, streamed or not.
  const banned = await client.completions.create({ ...body, logit_bias: { 400: -100 }, max_tokens: 20 });
  assert.ok(!banned.choices[0].logprobs.tokens.includes(tokens[0]));
  let streamed = '';
  for await (const chunk of await client.completions.create({ ...body, logit_bias: { 400: 100 }, stream: true }))
    for (const ch of chunk.choices) streamed += ch.text;
  assert.equal(streamed, forced.choices[0].text);
});

test('malformed bodies and headers get the right 4xx, the server keeps serving', async () => {
  const chat = '/v1/chat/completions';
  const msgs = JSON.stringify(userMessages);
  const table = [
    [chat, '{not json', {}, 400],
    [chat, '[]', {}, 400],
    [chat, '{}', {}, 400],
    [chat, '{"messages": "hi"}', {}, 400],
    [chat, '{"messages": []}', {}, 400],
    [chat, '{"messages": [{"role": 1, "content": "x"}]}', {}, 400],
    [chat, '{"messages": [{"role": "user", "content": 5}]}', {}, 400],
    [chat, `{"messages": ${msgs}, "max_tokens": "5"}`, {}, 400],
    [chat, `{"messages": ${msgs}, "max_tokens": -1}`, {}, 400],
    [chat, `{"messages": ${msgs}, "stop": 5}`, {}, 400],
    [chat, `{"messages": ${msgs}, "stream": "yes"}`, {}, 400],
    [chat, `{"messages": ${msgs}, "top_p": 7}`, {}, 400],
    ['/v1/completions', '{"prompt": [1, "a"]}', {}, 400],
    ['/v1/completions', '{"prompt": [99999999]}', {}, 400],
    ['/v1/completions', '{}', {}, 400],
    [chat, `{"messages": ${msgs}, "pad": "${'x'.repeat(70000)}"}`, {}, 413],
    [chat, `{"messages": ${msgs}}`, { Authorization: '' }, 401],
    [chat, `{"messages": ${msgs}}`, { Authorization: 'Basic abc' }, 401],
    [chat, `{"messages": ${msgs}}`, { Authorization: 'Bearer nope' }, 401],
    ['/v1/nothing', '{}', {}, 404],
    ['/v1/models', '{}', {}, 405],
    [chat, `{"messages": ${msgs}, "stream": true, "stream_options": {"include_usage": 1}}`, {}, 400],
  ];
  for (const [path, body, headers, status] of table) {
    const r = await raw(path, { body, headers });
    assert.equal(r.status, status, `${path} ${body.slice(0, 60)} ${JSON.stringify(headers)}: ${r.text.slice(0, 200)}`);
    const err = JSON.parse(r.text).error;
    assert.ok(err && typeof err.message === 'string', r.text.slice(0, 200));
  }
  // Nested deeper than a copy of the value may recurse through (300 000 levels crashed the server).
  for (const [path, body] of [[chat, `{"messages": ${msgs}, "tools": [${'['.repeat(30000)}${']'.repeat(30000)}]}`],
    ['/apply-template', `{"messages": ${msgs}, "x": ${'{"a": '.repeat(129)}1${'}'.repeat(129)}}`]]) {
    const r = await raw(path, { body });
    assert.equal(r.status, 400, r.text.slice(0, 200));
    assert.match(JSON.parse(r.text).error.message, /nests arrays and objects more than 128 deep/);
  }
  // A prompt text too long for the context in any tokenization is refused before it is tokenized.
  for (const [path, body] of [['/v1/completions', `{"prompt": "${'Once upon a time '.repeat(3000)}"}`],
    [chat, `{"messages": [{"role": "user", "content": "${'Once upon a time '.repeat(3000)}"}]}`]]) {
    const r = await raw(path, { body });
    assert.equal(r.status, 400, r.text.slice(0, 200));
    assert.match(JSON.parse(r.text).error.message, /the prompt has 5\d{4} bytes, more than the context of 256 tokens can hold/);
  }
  const wrongMethod = await fetch(base + chat, { headers: { Authorization: `Bearer ${KEY}` } });
  assert.equal(wrongMethod.status, 405);
  assert.equal(wrongMethod.headers.get('allow'), 'POST');
  const usageOption = await raw(chat, { body: `{"messages": ${msgs}, "stream_options": {"include_usage": "yes"}}` });
  assert.equal(JSON.parse(usageOption.text).error.param, 'stream_options.include_usage');
  const health = await raw('/health', { method: 'GET', headers: { Authorization: '' } });
  assert.equal(health.status, 200);
  const ok = await raw(chat, { body: `{"messages": ${msgs}, "max_tokens": 3, "unknown_field": {"a": 1}}` });
  assert.equal(ok.status, 200, ok.text);
  // Their neutral values pass.
  const neutral = await raw(chat, { body: `{"messages": ${msgs}, "max_tokens": 3, "response_format": {"type": "text"}, `
    + '"logit_bias": {}, "tool_choice": "auto"}' });
  assert.equal(neutral.status, 200, neutral.text);
  // llama-server's repetition penalty is honoured: greedy text changes under a strong one.
  const story = { prompt: 'Once upon a time', max_tokens: 24, temperature: 0 };
  const plainText = JSON.parse((await raw('/v1/completions', { body: JSON.stringify(story) })).text).choices[0].text;
  const penalised = await raw('/v1/completions', { body: JSON.stringify({ ...story, repeat_penalty: 5, repeat_last_n: -1 }) });
  assert.equal(penalised.status, 200, penalised.text);
  assert.notEqual(JSON.parse(penalised.text).choices[0].text, plainText);
  for (const extra of ['"echo": true', '"best_of": 2', '"suffix": "end"']) {
    const r = await raw('/v1/completions', { body: `{"prompt": "Once", "max_tokens": 2, ${extra}}` });
    assert.equal(r.status, 400, `${extra}: ${r.text}`);
  }
});

test('a client that disconnects mid-stream frees its slot', async () => {
  const controller = new AbortController();
  const stream = await client.chat.completions.create({ model: MODEL, messages: userMessages, max_tokens: 200,
    temperature: 0.8, stream: true }, { signal: controller.signal });
  let n = 0;
  try {
    for await (const _ of stream) if (++n === 3) controller.abort();
  } catch (e) {
    assert.ok(e.name === 'APIUserAbortError' || e.name === 'AbortError', e.name);
  }
  let busy = 1;
  for (let i = 0; i < 40 && busy > 0; ++i) {
    await new Promise((r) => setTimeout(r, 50));
    busy = JSON.parse((await raw('/health', { method: 'GET' })).text).slots_processing;
  }
  assert.equal(busy, 0, 'the slot is still busy 2 s after the client left');
});

test('a chunked body is held to --max-body too', async () => {
  const big = await postChunked('/v1/completions', [`{"prompt": "${'x'.repeat(40000)}`, `${'x'.repeat(40000)}"}`]);
  assert.equal(big.status, 413, big.text.slice(0, 200));
  assert.match(JSON.parse(big.text).error.message, /larger than 65536 bytes/);
  const small = await postChunked('/v1/completions', ['{"prompt": "Once upon', ' a time", "max_tokens": 3}']);
  assert.equal(small.status, 200, small.text);
  assert.equal(JSON.parse(small.text).usage.completion_tokens, 3);
});

// What a raw request gets back, and whether the server then closed the connection.
function rawSocket(request) {
  return new Promise((resolve, reject) => {
    const url = new URL(base);
    const sock = net.connect(Number(url.port), url.hostname, () => sock.write(request));
    let text = '';
    const timer = setTimeout(() => { sock.destroy(); resolve({ text, closed: false }); }, 5000);
    sock.on('data', (d) => { text += d; });
    sock.on('end', () => { clearTimeout(timer); resolve({ text, closed: true }); });
    sock.on('error', (e) => { clearTimeout(timer); reject(e); });
  });
}

test('a body framed badly is refused at once and its connection closed', async () => {
  const head = (framing) => `POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\n` +
    `Content-Type: application/json\r\n${framing}\r\n\r\n{"prompt": "Once"}GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n`;
  for (const [framing, status, message] of [
    ['Content-Length: -5', 400, /Content-Length '-5' is not a byte count/],
    ['Content-Length: 18\r\nContent-Length: 19', 400, /two different Content-Length/],
    ['Content-Length: 18\r\nTransfer-Encoding: chunked', 400, /both Content-Length and Transfer-Encoding/],
    ['Transfer-Encoding: gzip', 501, /only chunked/],
    ['Content-Length: 99999999999', 413, /larger than 65536 bytes/],
  ]) {
    const r = await rawSocket(head(framing));
    assert.ok(r.text.startsWith(`HTTP/1.1 ${status} `), `${framing}: ${r.text.slice(0, 200)}`);
    assert.match(r.text, message, framing);
    assert.ok(r.closed, `${framing}: the connection stayed open`);
    assert.equal(r.text.match(/HTTP\/1\.1 /g).length, 1, `${framing}: the body was read as a request`);
  }
});

test('CORS: the --cors origin is answered with its headers and may ask first; other origins are not', async () => {
  const ask = (origin) => fetch(base + '/v1/chat/completions', { method: 'OPTIONS',
    headers: { Origin: origin, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'authorization,content-type' } });
  const pre = await ask(PAGE_ORIGIN);
  assert.equal(pre.status, 204);
  assert.equal(pre.headers.get('access-control-allow-origin'), PAGE_ORIGIN);
  assert.match(pre.headers.get('access-control-allow-headers'), /Authorization/);
  assert.match(pre.headers.get('access-control-allow-methods'), /POST/);
  const post = await fetch(base + '/v1/completions', { method: 'POST', body: JSON.stringify({ prompt: 'Once', max_tokens: 2 }),
    headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json', Origin: PAGE_ORIGIN } });
  assert.equal(post.status, 200);
  assert.equal(post.headers.get('access-control-allow-origin'), PAGE_ORIGIN);
  await post.text();
  const other = await ask('https://elsewhere.example');
  assert.notEqual(other.status, 204);
  assert.equal(other.headers.get('access-control-allow-origin'), null);
  await other.text();
});

test('a second server on a port in use exits with an error naming it', async () => {
  const port = new URL(base).port;
  const second = spawn(binary, ['serve', '-m', modelPath, '--port', port, '-t', '1'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  second.stderr.on('data', (d) => { err += d; });
  const timer = setTimeout(() => second.kill('SIGKILL'), 10000);
  const code = await new Promise((resolve) => second.on('exit', (c) => resolve(c)));
  clearTimeout(timer);
  assert.equal(code, 1, `exit ${code}: ${err}`);
  assert.ok(err.includes(`cannot listen on 127.0.0.1:${port}`), err);
});

test('apply-template renders the chat prompt', async () => {
  const r = await raw('/apply-template', { body: JSON.stringify({ messages: userMessages }) });
  assert.equal(r.status, 200, r.text);
  assert.equal(JSON.parse(r.text).prompt, '<|im_start|>user\nOnce upon a time<|im_end|>\n<|im_start|>assistant\n');
});

test('tokenize and detokenize, as llama-server answers them', async () => {
  const text = 'Once upon a time';
  const t = await raw('/tokenize', { body: JSON.stringify({ content: text }) });
  assert.equal(t.status, 200, t.text);
  const ids = JSON.parse(t.text).tokens;
  assert.ok(ids.length > 2 && ids.every(Number.isInteger), t.text);
  // The same ids as the prompt of a completion (with BOS there).
  const c = await client.completions.create({ model: MODEL, prompt: text, max_tokens: 1 });
  assert.equal(c.usage.prompt_tokens, ids.length + 1);
  const withBos = JSON.parse((await raw('/tokenize', { body: JSON.stringify({ content: text, add_special: true }) })).text).tokens;
  assert.deepEqual(withBos.slice(1), ids);
  const pieces = JSON.parse((await raw('/tokenize', { body: JSON.stringify({ content: text, with_pieces: true }) })).text).tokens;
  assert.deepEqual(pieces.map((p) => p.id), ids);
  assert.equal(pieces.map((p) => p.piece).join('').trim(), text);
  const d = await raw('/detokenize', { body: JSON.stringify({ tokens: ids }) });
  assert.equal(d.status, 200, d.text);
  assert.equal(JSON.parse(d.text).content.trim(), text);
  // Pieces as they are, as llama-server gives them: special tokens' text too.
  const withText = JSON.parse((await raw('/detokenize', { body: JSON.stringify({ tokens: withBos }) })).text).content;
  assert.equal(withText, '<s>' + JSON.parse(d.text).content);
  // A piece that is part of a character comes as its bytes.
  const bytes = JSON.parse((await raw('/tokenize', { body: JSON.stringify({ content: '日', with_pieces: true }) })).text).tokens;
  assert.ok(bytes.some((p) => Array.isArray(p.piece)), JSON.stringify(bytes));
  for (const [path, body, param] of [['/tokenize', '{}', 'content'], ['/tokenize', '{"content": 5}', 'content'],
    ['/detokenize', '{"tokens": [1, -2]}', 'tokens'], ['/detokenize', '{"tokens": [99999]}', 'tokens'],
    ['/detokenize', '[]', 'object']]) {
    const r = await raw(path, { body });
    assert.equal(r.status, 400, `${path} ${body}: ${r.text}`);
    assert.ok(r.text.includes(param), r.text);
  }
  assert.equal((await raw('/tokenize', { method: 'GET' })).status, 405);
});

test('metrics', async () => {
  const r = await raw('/metrics', { method: 'GET' });
  assert.equal(r.status, 200);
  for (const needle of ['shardlm_requests_total{status="200"}', 'shardlm_requests_total{status="400"}',
    'shardlm_time_to_first_token_seconds_count', 'shardlm_inter_token_latency_seconds_bucket',
    'shardlm_generation_tokens_total', 'shardlm_prompt_cached_tokens_total', 'shardlm_kv_slots 4'])
    assert.ok(r.text.includes(needle), needle);
});

test('shardlm bench serve loads the server and reports one JSON line', async () => {
  const out = await new Promise((resolve, reject) => {
    const b = spawn(binary, ['bench', 'serve', '--url', base, '--clients', '2', '--prompt', '8', '--gen', '4',
      '--requests', '4', '--api-key', KEY, '--label', 'test'], { stdio: ['ignore', 'pipe', 'inherit'] });
    let text = '';
    b.stdout.on('data', (d) => { text += d; });
    b.on('exit', (code) => (code === 0 ? resolve(text) : reject(new Error(`bench serve exited with ${code}`))));
  });
  const r = JSON.parse(out);
  assert.equal(r.label, 'test');
  assert.equal(r.requests, 4);
  assert.ok(r.tok_per_s > 0 && r.ttft_p50_ms > 0 && r.ttft_p99_ms >= r.ttft_p50_ms, out);
});

const greedyText = {};
if (layout) {
  test('cluster: greedy outputs equal a single-node server\'s', async () => {
    const single = await startServer([]);
    try {
      const local = new OpenAI({ apiKey: KEY, baseURL: `${single.base}/v1`, maxRetries: 0, timeout: 20000 });
      for (const prompt of ['Once upon a time', 'The little dog', 'Lily and Tom']) {
        const body = { model: MODEL, prompt, max_tokens: 24, temperature: 0 };
        const [a, b] = await Promise.all([client.completions.create(body), local.completions.create(body)]);
        assert.equal(a.choices[0].text, b.choices[0].text, prompt);
        greedyText[prompt] = b.choices[0].text;
      }
      // Sampling sharded over the workers gives one node's log-probabilities (within 1e-4).
      const [a, b] = await Promise.all([chatLogprobs(client, false), chatLogprobs(local, false)]);
      assert.equal(a.text, b.text);
      closeLogprobs(a.content, b.content, 'cluster vs single node');
      a.content.forEach((e, i) => closeLogprobs(e.top_logprobs, b.content[i].top_logprobs, `top list of token ${i}`));
    } finally {
      single.child.kill('SIGTERM');
    }
  });

  // The workers take 10 ms a token here, so 200 tokens outlast each check below.
  test('cluster: a client that leaves a whole answer, or its place in the queue, frees it', async () => {
    const body = { model: MODEL, prompt: 'Once upon a time', max_tokens: 200, temperature: 0.8 };
    const whole = new AbortController();
    const abandoned = client.completions.create(body, { signal: whole.signal }).catch((e) => e);
    assert.ok(await within(2000, async () => (await slotsBusy()) === 1), 'the request never started');
    whole.abort();
    assert.ok((await abandoned) instanceof Error);
    assert.ok(await within(1000, async () => (await slotsBusy()) === 0), 'the slot is busy 1 s after the client left');

    // Four streams take the four slots; a fifth request waits, and its client leaves.
    const holders = [0, 1, 2, 3].map(() => new AbortController());
    const streams = holders.map((h) => raw('/v1/completions', { body: JSON.stringify({ ...body, stream: true }) , signal: h.signal }).catch((e) => e));
    assert.ok(await within(2000, async () => (await slotsBusy()) === 4), 'four streams did not start');
    const waiter = new AbortController();
    const queued = raw('/v1/completions', { body: JSON.stringify({ ...body, stream: true }), signal: waiter.signal }).catch((e) => e);
    assert.ok(await within(1000, async () => (await requestsWaiting()) === 1), 'the fifth request is not waiting');
    waiter.abort();
    await queued;
    assert.ok(await within(1000, async () => (await requestsWaiting()) === 0), 'the request still waits 1 s after its client left');
    assert.equal(await slotsBusy(), 4);
    for (const h of holders) h.abort();
    await Promise.all(streams);
    assert.ok(await within(1000, async () => (await slotsBusy()) === 0));
  });

  // A greedy completion once the server has formed its job again; 503 meanwhile.
  async function servedAgain() {
    for (let i = 0; i < 40; ++i) {
      try {
        const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 24, temperature: 0 });
        return r.choices[0].text;
      } catch (e) {
        assert.ok(e.status === 503, String(e));
      }
      await new Promise((r) => setTimeout(r, 250));
    }
    return null;
  }

  // Last: it leaves the server on another worker than at the start.
  test('cluster: a worker killed under four streams ends them with an error naming it, the server goes on without it', async () => {
    const victim = workers[1];
    assert.deepEqual(JSON.parse((await raw('/health', { method: 'GET' })).text).nodes, workers.map((w) => w.address));
    const results = [];
    let started = 0;
    let killedAt = 0;
    let resolveStarted;
    const allStarted = new Promise((resolve) => { resolveStarted = resolve; });
    const streams = ['Lily went', 'The sun', 'Tom had a ball', 'A big bird'].map(async (p) => {
      try {
        const stream = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: p }],
          max_tokens: 200, temperature: 0, stream: true });
        let n = 0;
        for await (const _ of stream) {
          if (++n === 3 && ++started === 4) resolveStarted();
        }
        results.push({ ok: true });
      } catch (e) {
        results.push({ ok: false, message: String(e.message), status: e.status, at: Date.now() });
      }
    });
    await Promise.race([allStarted, Promise.all(streams)]);
    assert.equal(started, 4, 'four streams were running');
    killedAt = Date.now();
    process.kill(-victim.child.pid, 'SIGKILL');
    await Promise.all(streams);
    assert.equal(results.length, 4);
    for (const r of results) {
      assert.equal(r.ok, false, 'a stream ended normally although its worker died');
      assert.ok(r.message.includes(victim.address), r.message);
      assert.ok(r.at - killedAt < 2000, `the error came ${r.at - killedAt} ms after the kill`);
    }
    const health = await raw('/health', { method: 'GET' });
    assert.equal(health.status, 503, health.text);
    const h = JSON.parse(health.text);
    assert.equal(h.status, 'degraded');
    assert.ok(h.error.includes(victim.address), health.text);
    const models = await client.models.list();
    assert.deepEqual(models.data.map((m) => m.id), [MODEL]);

    // The node stays dead: the next request is served on the other one, with the same greedy text.
    const survivor = workers[0];
    assert.equal(await servedAgain(), greedyText['Once upon a time'], 'served on the remaining node');
    let h2 = JSON.parse((await raw('/health', { method: 'GET' })).text);
    assert.equal(h2.status, 'ok');
    assert.deepEqual(h2.nodes, [survivor.address]);

    // The node comes back on its address and then the one serving dies: a recovery takes the returned one in.
    const port = victim.address.split(':')[1];
    const back = spawn(binary, ['worker', '--listen', `127.0.0.1:${port}`, '--probe-mib', '1'],
      { stdio: ['ignore', 'ignore', 'ignore'], detached: true, env: TOKEN_ENV });
    workers.push({ child: back, address: victim.address });
    process.kill(-survivor.child.pid, 'SIGKILL');
    assert.equal(await servedAgain(), greedyText['Once upon a time'], 'served again after the node came back');
    h2 = JSON.parse((await raw('/health', { method: 'GET' })).text);
    assert.deepEqual(h2.nodes, [victim.address]);
    const healthy = await raw('/health', { method: 'GET' });
    assert.equal(healthy.status, 200, healthy.text);

    // Every node dead: after a try at forming the job again, /health and the
    // requests say why that failed too, not only the first failure.
    process.kill(-back.pid, 'SIGKILL');
    let why = '';
    for (let i = 0; i < 40 && !why.includes('forming the job again failed'); ++i) {
      const r = await raw('/v1/completions', { body: JSON.stringify({ prompt: 'Once', max_tokens: 2 }) });
      assert.equal(r.status, 503, r.text);
      why = JSON.parse((await raw('/health', { method: 'GET' })).text).error ?? '';
      await new Promise((r) => setTimeout(r, 250));
    }
    assert.match(why, /forming the job again failed: .*(no worker left|cannot connect)/, why);
  });
}

let failed = 0;
for (const t of tests) {
  const t0 = Date.now();
  try {
    await t.fn();
    console.log(`ok   ${t.name} (${Date.now() - t0} ms)`);
  } catch (e) {
    ++failed;
    console.log(`FAIL ${t.name}: ${e.stack || e}`);
  }
}
// SIGTERM stops the server: it exits 0 within a few seconds, also with a stream running.
{
  const running = fetch(`${base}/v1/completions`, { method: 'POST', headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: 'Once', max_tokens: 200, stream: true }) }).then((r) => r.text()).catch(() => '');
  await new Promise((r) => setTimeout(r, 200));
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 10000);
  const { code, signal } = await exited;
  clearTimeout(timer);
  await running;
  if (code !== 0) {
    ++failed;
    console.log(`FAIL SIGTERM: the server exited with ${code} (signal ${signal})`);
  } else {
    console.log('ok   SIGTERM stops the server, exit 0');
  }
}
for (const w of workers) {
  try {
    process.kill(-w.child.pid, 'SIGKILL');
  } catch {}
}
process.exit(failed ? 1 : 0);
