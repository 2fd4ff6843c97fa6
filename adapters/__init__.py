"""Chain and storage adapters: web3 chain access and the contract wrapper, content-addressed
storage, local service processes (anvil, IPFS), contract compilation. Imports only
``protocol``."""
