// The stand-in Durable Object namespace behind a front's `SHARD_OBJECT` when shard
// `env.SHARD_INDEX`'s replicas run in isolates of their own (worker/local.mjs `replicaIsolates`):
// `getByName`, the one method the front calls, sends the object name `shard-<i>/<r>`
// (`cobordism_shard::object_name`) to replica r's namespace, the binding `REPLICA_<r>`. Any other
// name is refused, so a change of the naming fails the tests rather than silently landing every
// session on one replica. Miniflare loads it as a wrapped binding: the default export builds it.

/** workers-rs checks the class name of the binding. */
class DurableObjectNamespace {
  constructor(env) {
    this.env = env;
  }

  /** The namespace of the replica that `name` names; throws for any other name. */
  replica(name) {
    const prefix = `shard-${this.env.SHARD_INDEX}/`;
    const replica = name.startsWith(prefix) ? name.slice(prefix.length) : "";
    const namespace = /^[0-9]+$/.test(replica) ? this.env[`REPLICA_${Number(replica)}`] : undefined;
    if (!namespace) {
      throw new Error(
        `replica router of shard ${this.env.SHARD_INDEX}: no replica for the object name ${JSON.stringify(name)}`,
      );
    }
    return namespace;
  }

  getByName(name, options) {
    return this.replica(name).getByName(name, options);
  }
}

export default function (env) {
  return new DurableObjectNamespace(env);
}
