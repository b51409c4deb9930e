// @kubernetes/client-node against keel-apiserver: list (selectors, pages), watch from a
// resourceVersion, an informer (list then watch), JSON, merge and strategic merge patches, and errors.
// Usage: node client.mjs <client-node entry point> <kubeconfig>; prints one JSON object of results.
import { pathToFileURL } from 'node:url';

const k8s = await import(pathToFileURL(process.argv[2]).href);
const kc = new k8s.KubeConfig();
kc.loadFromFile(process.argv[3]);
const core = kc.makeApiClient(k8s.CoreV1Api);
const apps = kc.makeApiClient(k8s.AppsV1Api);
const namespace = 'node-client';
const results = {};

const withTimeout = (promise, what) =>
  Promise.race([
    promise,
    new Promise((_, reject) => setTimeout(() => reject(new Error(`timed out: ${what}`)), 20000).unref()),
  ]);

await core.createNamespace({ body: { metadata: { name: namespace } } });
for (let i = 0; i < 5; i++) {
  await core.createNamespacedConfigMap({
    namespace,
    body: { metadata: { name: `cm-${i}`, labels: { parity: i % 2 ? 'odd' : 'even' } }, data: { i: `${i}` } },
  });
}
const even = await core.listNamespacedConfigMap({ namespace, labelSelector: 'parity=even' });
results.even = even.items.map((cm) => cm.metadata.name);
const byName = await core.listNamespacedConfigMap({ namespace, fieldSelector: 'metadata.name=cm-3' });
results.byName = byName.items.map((cm) => cm.metadata.name);

// Pages of two, following the continue token.
const paged = [];
let token;
do {
  const page = await core.listNamespacedConfigMap({ namespace, limit: 2, _continue: token });
  paged.push(...page.items.map((cm) => cm.metadata.name));
  token = page.metadata._continue;
} while (token);
results.paged = paged;

// A watch from the list's resourceVersion sees what happens after it, in order.
const start = await core.listNamespacedConfigMap({ namespace });
const seen = [];
const watch = new k8s.Watch(kc);
let finish;
const finished = new Promise((resolve) => (finish = resolve));
const request = await watch.watch(
  `/api/v1/namespaces/${namespace}/configmaps`,
  { resourceVersion: start.metadata.resourceVersion },
  (type, object) => {
    seen.push([type, object.metadata.name]);
    if (seen.length === 3) finish();
  },
  (err) => err && finish(err),
);
await core.deleteNamespacedConfigMap({ name: 'cm-0', namespace });
await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'cm-late' } } });
await core.patchNamespacedConfigMap(
  { name: 'cm-late', namespace, body: { data: { late: 'yes' } } },
  k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
);
await withTimeout(finished, 'watch events');
request.abort();
results.watch = seen;

// An informer lists, then watches; it reports objects created after it started.
const informer = k8s.makeInformer(kc, `/api/v1/namespaces/${namespace}/configmaps`, () =>
  core.listNamespacedConfigMap({ namespace }),
);
let added;
const informed = new Promise((resolve) => (added = resolve));
informer.on('add', (object) => object.metadata.name === 'cm-informed' && added());
await informer.start();
results.informerListed = informer.list(namespace).map((cm) => cm.metadata.name).sort();
await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'cm-informed' } } });
await withTimeout(informed, 'informer add');
await informer.stop();

// Patches: JSON patch (client-node's default), merge patch and strategic merge patch.
await core.patchNamespacedConfigMap({
  name: 'cm-1',
  namespace,
  body: [{ op: 'add', path: '/data/j', value: 'json' }],
});
const merged = await core.patchNamespacedConfigMap(
  { name: 'cm-1', namespace, body: { data: { m: 'merge' } } },
  k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
);
results.patched = merged.data;
await apps.createNamespacedDeployment({
  namespace,
  body: {
    metadata: { name: 'web' },
    spec: {
      selector: { matchLabels: { app: 'web' } },
      template: {
        metadata: { labels: { app: 'web' } },
        spec: { containers: [{ name: 'a', image: 'busybox:1' }, { name: 'b', image: 'busybox:1' }] },
      },
    },
  },
});
const strategic = await apps.patchNamespacedDeployment(
  {
    name: 'web',
    namespace,
    body: { spec: { template: { spec: { containers: [{ name: 'b', image: 'busybox:2' }] } } } },
  },
  k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.StrategicMergePatch),
);
results.strategic = strategic.spec.template.spec.containers.map((c) => [c.name, c.image]);

for (const [key, call] of [
  ['missing', () => core.readNamespacedConfigMap({ name: 'nope', namespace })],
  ['duplicate', () => core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'cm-1' } } })],
]) {
  try {
    await call();
    results[key] = 'no error';
  } catch (err) {
    const body = typeof err.body === 'string' ? JSON.parse(err.body) : err.body;
    results[key] = [err.code, body.reason];
  }
}

console.log(JSON.stringify(results));
