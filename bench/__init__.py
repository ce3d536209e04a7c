"""`make bench`: Weft measured against the physical limits of the machine and
against a peer (DBOS Transact), side by side in one run. See bench/README.md."""
