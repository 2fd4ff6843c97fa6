"""Set-up and deployment: data, model, manifest, initial state, contract, registered nodes.

:func:`deploy` does everything a run needs before its first block: it loads and splits the
data, builds the model and the task manifest (whose SHA-256 is ``ruleParamsHash``),
publishes the initial global state and the manifest, deploys the task contract and registers
every aggregator and client. :class:`Deployment` then builds the nodes.

Storage: without ``--store`` every node (the task creator, each aggregator, each client) has
its own content store under ``RUN_DIR/store/<address>`` and reaches the others' as peers
(:class:`adapters.storage.PeerStore`), as separate IPFS nodes would; what one node holds is
not automatically what another holds, which is what the availability attestations are for.
With ``--store`` (a directory or an IPFS daemon) all nodes share that one store.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from eth_account.signers.local import LocalAccount
from phe.paillier import PaillierPublicKey

from adapters.chain import Chain
from adapters.contract import TaskConfig, TaskContract
from adapters.faultproof import FaultGamesContract, OneStepContract
from adapters.privacy_records import PrivacyRecordsContract, predicted_address
from adapters.storage import ContentStore, LocalStore, PeerStore, open_store
from aggregators.behaviours import HONEST, Behaviour
from aggregators.execution import stop_rule_of
from aggregators.fault_agent import FaultAgent, fault_params_hash_of
from aggregators.key_holder import KeyHolderNode
from aggregators.node import AggregatorNode
from aggregators.registry import make_rule, rule_id
from clients.data import (
    DATASETS,
    VALIDATION_SEED,
    Dataset,
    load_dataset,
    partition,
    stratified_subset,
)
from clients.models import build_model, get_params, param_spec
from clients.node import ClientNode, PrivatePayloads
from clients.training import TrainConfig, default_training
from consensus.messages import Domain
from fedchain.config import ROTATIONS, WEI_PER_ETH, DemoConfig, short_reason
from fedchain.private_view import (
    HePayloads,
    HeView,
    SecAggClient,
    SecAggView,
    private_views,
    task_records,
)
from fedchain.sim.driver.engine import ModelSpec
from fedchain.sim.scenario import CLIENT_OFFLINE, Collusion, Scenario, client_attack_hooks
from privacy.client_keys import ClientSecrets
from privacy.distributed import check_ring
from privacy.he import generate_keypair, public_key_bytes
from privacy.spec import PrivacySpec
from privacy.threshold_paillier import KeyShare, ThresholdKey, deal, generate_safe_prime
from protocol.cid import content_digest
from protocol.errors import ChainError, ConfigError, StorageError
from protocol.fixedpoint import INT32_MAX, NumericFormat, quantise
from protocol.manifest import TaskManifest
from protocol.merkle import ChunkTree
from protocol.metrics import PhaseClock
from protocol.payloads import GlobalState, ModelLayout, encode_global_state


def federated_data(cfg: DemoConfig) -> tuple[Dataset, Dataset, list[np.ndarray]]:
    """The run's train and test sets and each client's index set (a pure function of cfg).

    Every process of a testnet calls this with the same configuration and gets the same
    split, so a client process needs nothing but the configuration and its index. A loader
    that sizes its data by the population (``mixture``) gets ``num_clients``; one that reads
    files (``mnist``) gets ``--data-path``.
    """
    options: dict[str, Any] = {"seed": cfg.seed}
    accepted = (
        inspect.signature(DATASETS[cfg.dataset]).parameters if cfg.dataset in DATASETS else {}
    )
    if "num_clients" in accepted:
        options["num_clients"] = cfg.clients
    if cfg.data_path is not None:
        if "path" not in accepted:
            raise ConfigError(
                f"--data-path {cfg.data_path!r}: dataset {cfg.dataset!r} reads no files"
            )
        options["path"] = cfg.data_path
    try:
        train, test = load_dataset(cfg.dataset, **options)
    except ConfigError as exc:
        where = f"--data-path {cfg.data_path!r}" if cfg.data_path else f"--dataset {cfg.dataset!r}"
        raise ConfigError(f"{where}: {exc}") from exc
    if cfg.train_samples is not None:
        train = train.subset(stratified_subset(train.y, cfg.train_samples, VALIDATION_SEED))
    options = {"alpha": cfg.alpha} if cfg.partition == "dirichlet" else {}
    try:
        parts = partition(
            cfg.partition, labels=train.y, num_clients=cfg.clients, seed=cfg.seed, **options
        )
    except ConfigError as exc:
        raise ConfigError(
            f"--partition {cfg.partition!r} with --clients {cfg.clients}: {exc}"
        ) from exc
    return train, test, parts


def privacy_plan(cfg: DemoConfig) -> tuple[PrivacySpec, int]:
    """The run's resolved privacy settings and the rounds its budget affords (all of them
    unless ``--budget-policy stop`` cut the run short)."""
    return cfg.privacy_spec().resolve(cfg.rounds)


def task_manifest(
    cfg: DemoConfig, train: Dataset, layout: ModelLayout, privacy: PrivacySpec | None = None
) -> TaskManifest:
    """The canonical task manifest of a run: rule and parameters, format, model, training,
    privacy (``privacy``: the resolved spec, with the HE key when there is one; default: the
    run's privacy plan)."""
    spec = privacy if privacy is not None else privacy_plan(cfg)[0]
    rule_params = make_rule(cfg.rule, cfg.rule_params).params  # typed, defaults included
    return TaskManifest(
        rule=cfg.rule,
        rule_params=dict(rule_params),
        numeric=NumericFormat(cfg.frac_bits, round(cfg.clip * 2**cfg.frac_bits)),
        model=cfg.model,
        input_shape=tuple(train.input_shape),
        num_classes=train.num_classes,
        layout=layout,
        client_training=asdict(train_config(cfg)),
        privacy=spec.to_manifest(),
        max_samples=cfg.max_samples,
        stop_norm=cfg.stop_norm,
        stop_patience=cfg.stop_patience,
    )


def train_config(cfg: DemoConfig) -> TrainConfig:
    """Client training settings: the options given, the model's defaults for the others
    (``clients.training.MODEL_TRAINING``); FedProx's ``mu`` is a task parameter of the rule."""
    rule_params = make_rule(cfg.rule, cfg.rule_params).params
    prox_mu = float(rule_params["mu"]) if cfg.rule == "fedprox" else cfg.prox_mu
    base = default_training(cfg.model)
    return TrainConfig(
        epochs=base.epochs if cfg.epochs is None else cfg.epochs,
        batch_size=base.batch_size if cfg.batch_size is None else cfg.batch_size,
        lr=base.lr if cfg.lr is None else cfg.lr,
        momentum=base.momentum if cfg.momentum is None else cfg.momentum,
        prox_mu=prox_mu,
        seed=cfg.seed,
    )


def task_config(cfg: DemoConfig, initial_digest: bytes, manifest_digest: bytes) -> TaskConfig:
    """The contract's constructor arguments for a run."""
    return TaskConfig(
        initial_model_digest=initial_digest,
        rule_id=rule_id(cfg.rule),
        rule_params_hash=manifest_digest,
        num_rounds=cfg.rounds,
        min_updates=cfg.min_updates or cfg.clients,
        max_updates=cfg.clients,
        collect_window=cfg.collect_window,
        collect_timeout=cfg.collect_timeout,
        abort_timeout=cfg.abort_timeout,
        max_samples=cfg.max_samples,
        client_allowlist=cfg.client_allowlist,
        client_deposit=cfg.client_deposit,
        min_collection_blocks=cfg.min_collection_blocks,
        submit_timeout=cfg.submit_blocks(),
        challenge_window=cfg.challenge_window,
        attest_window=cfg.attest_window,
        dispute_timeout=cfg.dispute_timeout,
        rotation_policy=ROTATIONS[cfg.rotation],
        rotation_seed=cfg.seed.to_bytes(32, "big"),
        aggregator_stake=WEI_PER_ETH,
        aggregate_bond=WEI_PER_ETH // 10,
        challenge_bond=WEI_PER_ETH // 10,
        timeout_penalty=WEI_PER_ETH // 10,
    )


def open_chain(cfg: DemoConfig, num_accounts: int) -> Chain:
    """The embedded chain, or the JSON-RPC node of ``--rpc-url`` with funded accounts."""
    if not cfg.rpc_url:
        return Chain.embedded(num_accounts=num_accounts, seed=cfg.seed)
    from eth_account import Account

    from adapters.services import ANVIL_FUNDING_KEY

    key = cfg.funding_key or ANVIL_FUNDING_KEY
    try:
        Account.from_key(key)
    except (ValueError, TypeError) as exc:  # never echo a key, not even a malformed one
        raise ConfigError("the funding key: not a valid secp256k1 private key") from exc
    try:
        return Chain.connect(cfg.rpc_url, funding_key=key, num_accounts=num_accounts, seed=cfg.seed)
    except ChainError as exc:
        raise ConfigError(f"--rpc-url {cfg.rpc_url!r}: {short_reason(exc)}") from exc


def open_run_store(cfg: DemoConfig, run_dir: Path) -> ContentStore:
    """The run's content store: ``--store`` (a directory or ``ipfs:<multiaddr>``) or the run's."""
    if not cfg.store:
        return LocalStore(run_dir / "store")
    try:
        return open_store(cfg.store)
    except OSError as exc:
        raise ConfigError(f"--store {cfg.store!r}: {exc.strerror or exc}") from exc
    except StorageError as exc:
        raise ConfigError(f"--store {cfg.store!r}: {short_reason(exc)}") from exc


@dataclass
class Deployment:
    """Everything deployed for one run, and the factories of its nodes."""

    cfg: DemoConfig
    scenario: Scenario
    store: ContentStore
    train_data: Dataset
    test_data: Dataset
    parts: list[np.ndarray]
    layout: ModelLayout
    train_config: TrainConfig
    manifest: TaskManifest
    chain: Chain
    task: TaskContract
    deployer: LocalAccount
    agg_accounts: list[LocalAccount]
    client_accounts: list[LocalAccount]
    domain: Domain
    #: each node's own store by address (None: every node uses ``store``)
    node_stores: dict[str, ContentStore] | None = None
    #: HE: the task key holder's account and Paillier private key (None otherwise)
    key_holder: LocalAccount | None = None
    he_private_key: Any = None
    #: threshold HE: the committee members' accounts and key shares (dealt at deployment)
    decryptors: list[LocalAccount] = field(default_factory=list)
    he_shares: list[tuple[ThresholdKey, KeyShare]] = field(default_factory=list)
    #: the fault-proof games (``dispute`` fault-proof or both), else None
    games: FaultGamesContract | None = None

    def store_for(self, address: str) -> ContentStore:
        """The store node ``address`` sees: its own plus its peers', or the shared one."""
        if self.node_stores is None:
            return self.store
        return PeerStore(self.node_stores[address], self.node_stores)

    _shared_model: Any = None
    _private_view: SecAggView | HeView | None = None

    @property
    def privacy(self) -> PrivacySpec:
        """The task's privacy settings, as its manifest binds them."""
        return PrivacySpec.from_manifest(self.manifest.privacy)

    def private_view(self) -> SecAggView | HeView | None:
        """The view of the task's published private material (one for every in-process
        node), or None for a task that hides no update."""
        if self._private_view is None:
            self._private_view = private_views(self.task, self.store, self.manifest)
        return self._private_view

    def client_private(self, index: int) -> PrivatePayloads | None:
        """Client ``index``'s part in secure aggregation or HE (None otherwise)."""
        view = self.private_view()
        if isinstance(view, SecAggView):
            account = self.client_accounts[index]
            registered = self.task.client_index(account.address)
            if registered is None:
                raise ConfigError(f"client {index} ({account.address}) is not registered")
            secrets = ClientSecrets(bytes(account.key), self.task.address, registered)
            return SecAggClient(view, secrets, account)
        if isinstance(view, HeView):
            return HePayloads(self.manifest)
        return None

    def make_key_holders(self, clock: PhaseClock) -> list[KeyHolderNode]:
        """The HE task's key holder node, or its threshold-decryption committee members
        (none for other tasks)."""
        if self.decryptors:
            records = task_records(self.task, self.manifest)
            return [
                KeyHolderNode(
                    f"decryptor-{i + 1}",
                    acct,
                    self.task,
                    records,
                    self.store_for(acct.address),
                    self.manifest,
                    None,
                    clock=clock,
                    share=share,
                )
                for i, (acct, share) in enumerate(zip(self.decryptors, self.he_shares, strict=True))
            ]
        holder = self.make_key_holder(clock)
        return [] if holder is None else [holder]

    def make_key_holder(self, clock: PhaseClock) -> KeyHolderNode | None:
        """The HE task's key holder node (None for other tasks)."""
        if self.key_holder is None:
            return None
        return KeyHolderNode(
            "key-holder",
            self.key_holder,
            self.task,
            task_records(self.task, self.manifest),
            self.store_for(self.key_holder.address),
            self.manifest,
            self.he_private_key,
            clock=clock,
        )

    @property
    def colluders(self) -> frozenset[str]:
        """Addresses of the aggregators whose PBFT behaviour is "colluding"."""
        return frozenset(
            self.agg_accounts[i].address
            for i, b in self.scenario.aggregators.items()
            if b.pbft == "colluding"
        )

    def behaviour(self, index: int) -> Behaviour:
        return self.scenario.aggregators.get(index, HONEST)

    @property
    def model_spec(self) -> ModelSpec:
        """The task's model architecture and initialisation seed (for training engines)."""
        d = self.train_data
        return ModelSpec(self.cfg.model, tuple(d.input_shape), d.num_classes, self.cfg.seed)

    def shared_model(self) -> Any:
        """One model object for every in-process client: training overwrites all of it."""
        if self._shared_model is None:
            self._shared_model = self.new_model()
        return self._shared_model

    def new_model(self) -> Any:
        """A fresh model of the task's architecture, initialised from the run's seed."""
        cfg = self.cfg
        return build_model(
            cfg.model, self.train_data.input_shape, self.train_data.num_classes, seed=cfg.seed
        )

    def make_aggregator(
        self, index: int, clock: PhaseClock, behaviour: Behaviour | None = None
    ) -> AggregatorNode:
        return AggregatorNode(
            f"aggregator-{index}",
            self.agg_accounts[index],
            self.chain,
            self.task,
            self.store_for(self.agg_accounts[index].address),
            self.manifest,
            clock=clock,
            behaviour=behaviour or self.behaviour(index),
            colluders=self.colluders,
            private=self.private_view(),
            leave_after_blocks=self.cfg.leave_after_blocks or None,
            fault=self.fault_agent(index, behaviour or self.behaviour(index)),
            dispute=self.cfg.dispute,
        )

    def fault_agent(self, index: int, behaviour: Behaviour) -> FaultAgent | None:
        """Aggregator ``index``'s side of the fault-proof games (None under PBFT only)."""
        if self.games is None:
            return None
        return FaultAgent(
            self.games,
            self.agg_accounts[index],
            window=claim_window(self.cfg),
            claim_bond=CLAIM_BOND,
            challenger=behaviour.challenger,
        )

    def make_oracle(self) -> AggregatorNode:
        """An honest re-executor used only for fault accounting (it never transacts). It
        sees the run's observer store (``store``: its own, not a peer of anyone's)."""
        return AggregatorNode(
            "oracle",
            self.agg_accounts[0],
            self.chain,
            self.task,
            self.store,
            self.manifest,
            private=self.private_view(),
        )

    def make_client(
        self,
        index: int,
        clock: PhaseClock,
        *,
        collusion: Collusion,
        ready: Callable[[int], bool],
    ) -> ClientNode:
        """Client ``index``; a scenario's attack wraps its data, delta or payload."""
        cfg = self.cfg
        data = self.train_data.subset(self.parts[index])
        delta_hook = payload_hook = None
        attack = self.scenario.clients.get(index)
        ready_hook = None
        address = self.client_accounts[index].address
        store = self.store_for(address)
        publish = None
        if attack is not None and attack.attack in ("publish_some", "publish_none"):
            to = list(attack.params.get("to", [])) if attack.attack == "publish_some" else []
            peers = [self.agg_accounts[i].address for i in to]
            publish = _partial_publisher(store, attack.active, peers)
        offline = attack.active if attack is not None and attack.attack == CLIENT_OFFLINE else None
        if attack is not None:
            data, delta_hook, payload_hook = client_attack_hooks(
                attack, data, self.layout, seed=cfg.seed * 1000 + index, collusion=collusion
            )
            if attack.omniscient:
                ready_hook = ready
        return ClientNode(
            f"client-{index}",
            self.client_accounts[index],
            self.task,
            store,
            self.manifest,
            data,
            self.shared_model(),
            self.train_config,
            index=index,
            clock=clock,
            delta_hook=delta_hook,
            payload_hook=payload_hook,
            ready=ready_hook,
            publish=publish,
            offline=offline,
            private=self.client_private(index),
            weight=None if attack is None or attack.weight is None else attack.registered_weight,
        )


def _partial_publisher(
    store: ContentStore, active: Callable[[int], bool], peers: list[str]
) -> Callable[[int, bytes], object]:
    """Publish a payload only to ``peers`` (not to the client's own node) in active rounds."""

    def publish(round_: int, payload: bytes) -> object:
        if not active(round_):
            return store.put(payload)
        if isinstance(store, PeerStore):
            return store.push(payload, peers)
        return None  # a shared store: withholding means not storing at all

    return publish


def deploy(cfg: DemoConfig, scenario: Scenario, run_dir: Path) -> Deployment:
    """Build the task, deploy the contract, register every node and start the task."""
    train, test, parts = federated_data(cfg)
    spec = privacy_plan(cfg)[0]
    # the HE task key holder's account, or one decryptor account per committee member
    threshold_he = "he" in spec.components and cfg.he_threshold > 0
    key_holder = (cfg.aggregators if threshold_he else 1) if "he" in spec.components else 0
    chain = open_chain(cfg, num_accounts=1 + cfg.aggregators + cfg.clients + key_holder)
    store = open_run_store(cfg, run_dir)
    node_stores: dict[str, ContentStore] | None = None
    if not cfg.store:
        # one store per node; ``store`` becomes the observer's view of all of them
        node_stores = {
            a.address: LocalStore(run_dir / "store" / a.address)
            for a in chain.accounts[: 1 + cfg.aggregators + cfg.clients + key_holder]
        }
        store = PeerStore(LocalStore(run_dir / "store" / "observer"), node_stores)
    model = build_model(cfg.model, train.input_shape, train.num_classes, seed=cfg.seed)
    layout = ModelLayout.from_spec(param_spec(model))
    he_private_key = None
    he_shares: list[tuple[ThresholdKey, KeyShare]] = []
    first_extra = 1 + cfg.aggregators + cfg.clients
    if threshold_he:
        # trusted dealer (docs/privacy.md): safe primes, the exponent shared t-of-n among
        # the committee; p, q and d are forgotten when this function returns
        p, q = (generate_safe_prime(cfg.he_key_bits // 2) for _ in range(2))
        key, shares = deal(p, q, cfg.he_threshold, cfg.aggregators)
        he_shares = [(key, share) for share in shares]
        spec = replace(
            spec,
            he_public_key=public_key_bytes(PaillierPublicKey(key.n)).hex(),
            he_threshold_key=key.to_bytes().hex(),
            he_decryptors=tuple(a.address for a in chain.accounts[first_extra:][:key_holder]),
        )
        spec.validate()
    elif key_holder:
        # the key holder generates its Paillier key; the public key goes into the manifest
        public, he_private_key = generate_keypair(cfg.he_key_bits)
        spec = replace(
            spec,
            he_public_key=public_key_bytes(public).hex(),
            he_key_holder=chain.accounts[1 + cfg.aggregators + cfg.clients].address,
        )
    deployer = chain.accounts[0]
    if spec.hides_updates:
        # TaskContract.deploy sends EquivocationEvidence (nonce) then the task (nonce + 1);
        # the records contract is deployed right after the task
        nonce = chain.w3.eth.get_transaction_count(deployer.address)
        spec = replace(spec, records_contract=predicted_address(deployer.address, nonce + 2))
    manifest = task_manifest(cfg, train, layout, spec)
    if spec.distributed:
        try:  # the model size is known only now: refuse sums that could wrap the ring
            check_ring(spec.ddp(), layout.size)
        except ConfigError as exc:
            raise ConfigError(
                f"--ddp-scale {cfg.ddp_scale}: {str(exc).split(': ', 1)[-1]}"
            ) from exc
    initial = quantise(layout.flatten(get_params(model)), cfg.frac_bits, INT32_MAX)
    clip = spec.clip_norm if spec.adaptive_clip else None
    initial_payload = encode_global_state(layout, GlobalState(0, initial, {}, clip))
    creator = store if node_stores is None else node_stores[chain.accounts[0].address]
    try:
        creator.put(initial_payload)  # the task creator's node serves them
        creator.put(manifest.to_bytes())
    except StorageError as exc:
        raise ConfigError(f"--store {cfg.store!r}: {short_reason(exc)}") from exc
    agg_accounts = chain.accounts[1 : 1 + cfg.aggregators]
    client_accounts = chain.accounts[1 + cfg.aggregators : 1 + cfg.aggregators + cfg.clients]
    holder = chain.accounts[first_extra] if key_holder and not threshold_he else None
    decryptors = (
        list(chain.accounts[first_extra : first_extra + key_holder]) if threshold_he else []
    )
    config = task_config(cfg, content_digest(initial_payload), manifest.digest)
    task = TaskContract.deploy(chain, deployer, config)
    if spec.hides_updates:
        records = PrivacyRecordsContract.deploy(
            chain,
            deployer,
            task.address,
            spec.reveal_window,
            (spec.num_clients or 0) if spec.secagg_plus else 0,
        )
        if records.address != spec.records_contract:
            raise ChainError(
                f"the privacy records contract landed at {records.address}, not at "
                f"{spec.records_contract} as the manifest says (another transaction of the "
                "deployer in between?)"
            )
    games = None
    if cfg.dispute != "pbft":
        one_step = OneStepContract.deploy(chain, deployer)
        games = FaultGamesContract.deploy(
            chain, deployer, one_step.address, game_clock(cfg), CHALLENGE_BOND
        )
        # before anyone stakes (the task refuses it later: members stake knowing the games
        # contract that can slash them); every aggregate now needs its submitter's claim;
        # the claims' chain of state roots starts at the initial state's; every claim must
        # carry the manifest's step parameters (rule, beta, dimension, value bound)
        task.set_fault_games(
            deployer, games.address, ChunkTree(initial).root, fault_params_hash_of(manifest)
        )
        stop = stop_rule_of(manifest)
        if stop is not None:  # the task counts quiet rounds from the claims' committed norms
            task.set_stop_rule(deployer, stop.threshold**2, stop.patience)
    for acct in agg_accounts:
        task.register_aggregator(acct)
    if cfg.client_allowlist:
        allowed = [a.address for a in client_accounts] + ([holder.address] if holder else [])
        task.allow_clients(deployer, allowed)
    for acct in client_accounts:
        task.register_client(acct)
    if holder is not None:
        task.register_client(holder)  # it signs its decryption records as the task's client
    for acct in decryptors:
        task.register_client(acct)  # each member signs its decryption-share records
    return Deployment(
        cfg=cfg,
        scenario=scenario,
        store=store,
        train_data=train,
        test_data=test,
        parts=parts,
        layout=layout,
        train_config=train_config(cfg),
        manifest=manifest,
        chain=chain,
        task=task,
        deployer=deployer,
        agg_accounts=agg_accounts,
        client_accounts=client_accounts,
        domain=Domain(int(chain.w3.eth.chain_id), task.address),
        node_stores=node_stores,
        key_holder=holder,
        he_private_key=he_private_key,
        decryptors=decryptors,
        he_shares=he_shares,
        games=games,
    )


#: Fault-proof bonds (wei): a claim's bond pays its refuter, a challenge's bond pays an
#: honest submitter for answering (docs/fault-proof.md "Bonds must cover the honest side's
#: gas"; the embedded chain's gas price makes these generous).
CLAIM_BOND = WEI_PER_ETH // 10
CHALLENGE_BOND = WEI_PER_ETH // 100


def game_clock(cfg: DemoConfig) -> int:
    """Each side's chess-clock budget in blocks: the challenge window, and at least two
    blocks per committee member (on a chain that mines a block per transaction, every other
    member's transaction between two of a player's turns spends one of its blocks)."""
    return max(4, cfg.challenge_window, 2 * cfg.aggregators)


def claim_window(cfg: DemoConfig) -> int:
    """Blocks a claim may be challenged: past the task's challenge window counted from the
    submission one block later (``submitAggregateWithClaim`` requires it), and at least two
    blocks per committee member (see :func:`game_clock`): a member that disagrees must be
    able to open its game after the others' transactions of the same blocks."""
    return max(cfg.challenge_window + 2, 2 * cfg.aggregators)
