// The Node side of the interop tests: a client built on @grpc/grpc-js and
// @grpc/grpc-js-xds that dials xds:///<target> with xDS channel credentials
// (fallback: insecure), so that the management server decides both where it
// connects and with which security, and reports every RPC as one JSON line
// on stdout for the Go tests (node_test.go) to assert on.
//
// Usage:
//
//   node client.js calls <target> <Method>[,<Method>...] [--deadline-ms=N]
//       One RPC per method, in order; one line each.
//   node client.js loop <target> [--workers=N] [--max-seconds=N] [--deadline-ms=N]
//       Who in a loop on N concurrent workers until stdin is closed (or
//       max-seconds pass); one line per RPC, then one summary line.
//
// The xDS bootstrap comes from GRPC_XDS_BOOTSTRAP (or
// GRPC_XDS_BOOTSTRAP_CONFIG), as for any gRPC xDS client.
//
// A line for an RPC:
//   {"seq":1,"method":"Who","code":0,"status":"OK","details":"",
//    "transport_security":"ssl","server_cert_sha256":"…","server_cert_cn":"server",
//    "reply":{"security":"tls","peer":"127.0.0.1:40000",…}}
// transport_security and server_cert_* are what grpc-js reports of the
// connection the RPC used ("" when it used none or no TLS); reply is the Who
// answer (absent for Ping and for failed RPCs). The summary line of loop:
//   {"summary":{"ok":N,"failed":N,"seconds":S}}
// Setup errors go to stderr and make the exit status non-zero; failed RPCs
// do not (they are results).

'use strict';

const crypto = require('crypto');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const grpcXds = require('@grpc/grpc-js-xds');
const protoLoader = require('@grpc/proto-loader');

function parseArgs(argv) {
  const positional = [];
  const flags = {};
  for (const arg of argv) {
    const m = /^--([a-z-]+)=(.*)$/.exec(arg);
    if (m) {
      flags[m[1]] = m[2];
    } else {
      positional.push(arg);
    }
  }
  return {positional, flags};
}

function intFlag(flags, name, def) {
  if (!(name in flags)) {
    return def;
  }
  const n = Number(flags[name]);
  if (!Number.isInteger(n) || n <= 0) {
    throw new Error(`client.js: --${name}=${flags[name]}: want a positive integer`);
  }
  return n;
}

function newClient(target) {
  const def = protoLoader.loadSync(path.join(__dirname, 'interop.proto'), {
    keepCase: true,
    oneofs: true,
  });
  const pkg = grpc.loadPackageDefinition(def);
  const Interop = pkg.proxylessgrpc.interop.node.Interop;
  const creds = new grpcXds.XdsChannelCredentials(grpc.credentials.createInsecure());
  return new Interop(`xds:///${target}`, creds);
}

// structToObject flattens a google.protobuf.Struct of string values.
function structToObject(s) {
  const out = {};
  for (const [k, v] of Object.entries((s && s.fields) || {})) {
    out[k] = v.kind === 'stringValue' ? v.stringValue : v[v.kind];
  }
  return out;
}

// connectionInfo is what grpc-js tells of the connection call used.
function connectionInfo(call) {
  const info = {transport_security: '', server_cert_sha256: '', server_cert_cn: ''};
  const auth = call.getAuthContext ? call.getAuthContext() : null;
  if (!auth) {
    return info;
  }
  info.transport_security = auth.transportSecurityType || '';
  const cert = auth.sslPeerCertificate;
  if (cert && cert.raw) {
    info.server_cert_sha256 = crypto.createHash('sha256').update(cert.raw).digest('hex');
    info.server_cert_cn = (cert.subject && cert.subject.CN) || '';
  }
  return info;
}

const codeNames = Object.fromEntries(Object.entries(grpc.status).map(([k, v]) => [v, k]));

// callOnce makes one RPC and resolves to its result line (never rejects).
function callOnce(client, method, deadlineMs, seq) {
  return new Promise((resolve) => {
    const deadline = new Date(Date.now() + deadlineMs);
    const call = client[method]({}, {deadline}, (err, reply) => {
      const line = {seq, method, code: 0, status: 'OK', details: ''};
      if (err) {
        line.code = err.code;
        line.status = codeNames[err.code] || String(err.code);
        line.details = err.details || err.message;
      }
      Object.assign(line, connectionInfo(call));
      if (!err && method === 'Who') {
        line.reply = structToObject(reply);
      }
      resolve(line);
    });
  });
}

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

async function runCalls(client, methods, deadlineMs) {
  let seq = 0;
  for (const method of methods) {
    if (typeof client[method] !== 'function') {
      throw new Error(`client.js: unknown method ${method}`);
    }
    emit(await callOnce(client, method, deadlineMs, ++seq));
  }
}

async function runLoop(client, workers, maxSeconds, deadlineMs) {
  let stop = false;
  const timer = setTimeout(() => { stop = true; }, maxSeconds * 1000);
  process.stdin.on('end', () => { stop = true; });
  process.stdin.on('error', () => { stop = true; });
  process.stdin.resume();
  const start = Date.now();
  let seq = 0, ok = 0, failed = 0;
  async function worker() {
    while (!stop) {
      const line = await callOnce(client, 'Who', deadlineMs, ++seq);
      if (line.code === 0) {
        ok++;
      } else {
        failed++;
      }
      emit(line);
    }
  }
  await Promise.all(Array.from({length: workers}, worker));
  clearTimeout(timer);
  emit({summary: {ok, failed, seconds: (Date.now() - start) / 1000}});
}

async function main() {
  const {positional, flags} = parseArgs(process.argv.slice(2));
  const [mode, target, methods] = positional;
  if (!target || (mode !== 'calls' && mode !== 'loop') || (mode === 'calls' && !methods)) {
    throw new Error('usage: client.js calls <target> <Method>[,<Method>...] | client.js loop <target> [--workers=N] [--max-seconds=N]');
  }
  const deadlineMs = intFlag(flags, 'deadline-ms', 5000);
  grpcXds.register();
  const client = newClient(target);
  if (mode === 'calls') {
    await runCalls(client, methods.split(','), deadlineMs);
  } else {
    await runLoop(client, intFlag(flags, 'workers', 4), intFlag(flags, 'max-seconds', 20), deadlineMs);
  }
  client.close();
}

main().then(
  // The xDS client keeps its stream to the management server open after the
  // channel closed; exit instead of waiting for it. Writes to a pipe are
  // synchronous on Linux, so every line is out.
  () => process.exit(0),
  (err) => {
    process.stderr.write(`${err.stack || err}\n`);
    process.exit(2);
  });
