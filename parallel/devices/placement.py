"""Where the weights live: small strategies that `data_parallelism` installs as custom getters.

Both strategies keep ONE variable namespace: the names the model function creates
("vgg16/conv1_1/weights", ...) are what weights are loaded by and saved as.

- `SharedVariables`: replica 0 creates the variables on its device and every other replica
  reads them from there. On several GPUs every step then copies every weight from GPU 0
  to each other GPU (3 x 553 MB per step for VGG16 on 4 GPUs). Kept because it is the
  baseline the tests measure against, and it is all a single device needs.
- `ReplicatedVariables`: every replica gets a resident copy on its own device (like
  tf_cnn_benchmarks' `VariableMgrLocalReplicated`), filled once at start-up by `load`;
  a step moves only input shards and outputs between devices.

Values are fed through placeholders, never embedded as graph constants: four replicas of
VGG16 as constants would break the 2 GB GraphDef limit. Each variable the model creates with
a full shape starts from its canonical name's placeholder (one on the host, whatever the
replicas): its own initializer is the load, so no zeros are built for it and no second assign
(a quarter fewer ops in ResNet-50's graph on 4 devices, built in 0.8 s of CPU instead of 1.4), and
no op that asks whether it is initialized (`_loaded_variable`: a sixth fewer again, built 15 to 20 %
faster: ConvNeXt-Tiny on 4 devices 1.45 to 1.56 s of CPU before, 1.18 to 1.25 after), and every use of it
is the one read made with it, not a read of its own (a sixth fewer again: ResNet-50 on 4 devices 2550 ops to
2126, ConvNeXt-Tiny 5932 to 5212).
"""

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import variable_pb2
from tensorflow.python.ops import gen_resource_variable_ops, resource_variable_ops

tf1 = tf.compat.v1


class Placement:
    """Base strategy: the devices, and the variables each canonical name maps to.

    Attributes:
      devices: tuple of device names, one replica each.
    """

    def __init__(self, devices):
        devices = tuple(devices)
        if not devices:
            raise ValueError("devices=%r: at least one device is needed" % (devices,))
        for device in devices:
            if not isinstance(device, str):
                raise ValueError("device names must be strings; got %r" % (device,))
        self.devices = devices
        self._copies = {}  # canonical name -> [variable per replica that holds its own copy]
        self._placeholders = {}  # canonical name -> the host placeholder its values are fed through
        self._fed = set()  # ids of the variables whose initializer reads their placeholder
        self._loader = None

    def custom_getter(self, replica):
        """Returns the custom getter for replica `replica` (None: plain get_variable)."""
        raise NotImplementedError

    def variables(self):
        """Returns {canonical name: [variables]}: every variable a load must fill."""
        return {name: list(copies) for name, copies in self._copies.items()}

    def _record(self, name, variable):
        copies = self._copies.setdefault(name, [])
        if all(variable is not existing for existing in copies):
            copies.append(variable)
        return variable

    def _get(self, getter, name, canonical, kwargs):
        """getter(name, **kwargs), the variable started from `canonical`'s placeholder when its shape is known
        (a variable without one, made from a value, is filled by an assign of its own at `load`)."""
        shape = kwargs.get("shape")
        if shape is None or not tf.TensorShape(shape).is_fully_defined():
            return self._record(canonical, getter(name, **kwargs))
        placeholder = self._placeholder(canonical, tf.as_dtype(kwargs.get("dtype") or tf.float32).base_dtype,
                                        tf.TensorShape(shape))
        made = []  # the initializer is called only when the variable is made, not when an existing one is reused
        with tf1.variable_creator_scope(_loaded_variable):
            variable = getter(name, **dict(kwargs, initializer=lambda *_, **__: made.append(True) or placeholder))
        if made:
            self._fed.add(id(variable))
        return self._record(canonical, variable)

    def _placeholder(self, name, dtype, shape):
        if name not in self._placeholders:
            graph = tf1.get_default_graph()
            # On the host, outside the replica's scopes: each device's initializer reads it once, at start-up.
            with graph.name_scope("load_weights/"), graph.device("/device:CPU:0"), graph.control_dependencies(None):
                self._placeholders[name] = tf1.placeholder(dtype, shape, name=name.replace("/", "_"))
        return self._placeholders[name]

    def load(self, session, values):
        """Fills every copy of every variable from host arrays, in one `Session.run`.

        The first call adds the op that runs every copy's initializer (and an assign for a
        variable made without a shape) to the variables' graph, so call it once before that graph
        is finalized; later calls reuse it.

        Args:
          session: the `tf.compat.v1.Session` running this graph.
          values: {canonical variable name: np.ndarray} with exactly the names of
            `variables()` and their shapes.

        Raises:
          ValueError: a missing or unexpected name, or a shape that does not match,
            naming the variable and both shapes.
        """
        expected = self.variables()
        missing = sorted(set(expected) - set(values))
        unexpected = sorted(set(values) - set(expected))
        if missing or unexpected:
            raise ValueError("weights do not match the model's variables: missing %s, unexpected %s"
                             % (missing or "none", unexpected or "none"))
        if not expected:
            return  # a model without weights
        if self._loader is None:
            self._loader = self._build_loader(expected)
        placeholders, assign_op = self._loader
        feed_dict = {}
        for name, placeholder in placeholders.items():
            array = np.asarray(values[name], dtype=placeholder.dtype.as_numpy_dtype)
            if not placeholder.shape.is_compatible_with(array.shape):
                raise ValueError("variable %s has shape %s but the weights give %s"
                                 % (name, placeholder.shape.as_list(), list(array.shape)))
            feed_dict[placeholder] = array
        session.run(assign_op, feed_dict)

    def _build_loader(self, variables):
        placeholders, ops = {}, []
        graph = next(iter(variables.values()))[0].graph  # the variables' graph, whatever the default is
        with graph.as_default(), graph.name_scope("load_weights/"):
            for name, copies in sorted(variables.items()):
                first = copies[0]
                placeholders[name] = self._placeholder(name, first.dtype.base_dtype, first.shape)
                # Each copy's op runs on its device: the value crosses to each device exactly once.
                ops.extend(copy.initializer if id(copy) in self._fed
                           else copy.assign(placeholders[name], read_value=False) for copy in copies)
            return placeholders, tf.group(*ops)


def _loaded_variable(next_creator, **kwargs):
    """A resource variable whose initializer assigns its placeholder (`Placement._get`): its handle, that assign
    and one read, as TensorFlow's own creator makes them, without the op that tells whether it is initialized
    (nothing asks: `load` runs every initializer) and at half the CPU; every use of it is that one read.
    Anything else: TensorFlow's creator."""
    ordinary = (not kwargs.get("caching_device") and kwargs.get("constraint") is None and kwargs.get("variable_def")
                is None and not kwargs.get("import_scope") and kwargs.get("use_resource") is not False and
                kwargs.get("validate_shape") is not False and kwargs.get("synchronization") in
                (None, tf.VariableSynchronization.AUTO) and kwargs.get("aggregation") in
                (None, tf.VariableAggregation.NONE))
    if not ordinary:  # what only TensorFlow's creator makes as asked
        return next_creator(**kwargs)
    graph = tf1.get_default_graph()
    collections = list(kwargs.get("collections") or [tf1.GraphKeys.GLOBAL_VARIABLES])
    trainable = kwargs.get("trainable", True) is not False
    if trainable and tf1.GraphKeys.TRAINABLE_VARIABLES not in collections:
        collections.append(tf1.GraphKeys.TRAINABLE_VARIABLES)
    with tf.init_scope(), graph.name_scope(kwargs["name"]) as scope:
        initial_value = kwargs["initial_value"]
        initial_value = initial_value() if callable(initial_value) else initial_value
        name = scope[:-1]
        handle = gen_resource_variable_ops.var_handle_op(dtype=initial_value.dtype.base_dtype,
                                                         shape=initial_value.shape, shared_name=name, name=scope)
        with graph.name_scope("Assign") as assign_scope, graph.colocate_with(None, ignore_existing=True), \
                graph.device(handle.device):
            assign = gen_resource_variable_ops.assign_variable_op(handle, initial_value, name=assign_scope)
        with graph.name_scope("Read"), graph.device(handle.device):
            read = gen_resource_variable_ops.read_variable_op(handle, initial_value.dtype.base_dtype)
    variable = resource_variable_ops.ResourceVariable(variable_def=variable_pb2.VariableDef(
        variable_name=handle.name, initializer_name=assign.name, snapshot_name=read.name, is_resource=True,
        trainable=trainable))
    # Its uses share that read, as TensorFlow's own caching_device makes them (without the identity it adds):
    # a graph of inference reads each weight once a step, and a read op for each use was a sixth of a ResNet's ops.
    variable._cached_value = read  # noqa: SLF001 -- ResourceVariable's cache of its read, which value() returns
    graph.add_to_collections(collections, variable)
    return variable


class SharedVariables(Placement):
    """Variables on the first device, read by every replica (tensor2tensor's default)."""

    def custom_getter(self, replica):
        def getter(getter, name, **kwargs):
            return self._get(getter, name, name, kwargs)
        return getter


class ReplicatedVariables(Placement):
    """A resident copy of every variable on every device.

    Replica 0's variables keep the canonical names; replica i > 0 gets
    "replica_<i>/<canonical name>", created on device i, in the LOCAL_VARIABLES
    collection and not trainable (it is a copy, not a second parameter).
    """

    def custom_getter(self, replica):
        def getter(getter, name, **kwargs):
            if replica == 0:
                return self._get(getter, name, name, kwargs)
            kwargs.update(reuse=tf1.AUTO_REUSE, trainable=False,
                          collections=[tf1.GraphKeys.LOCAL_VARIABLES])
            return self._get(getter, "replica_%d/%s" % (replica, name), name, kwargs)
        return getter
