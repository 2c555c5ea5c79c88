import numpy as np
import cubeclient as cube


def test_roundtrip(client):
    a = np.arange(10, dtype=np.float32)
    b = client.create(a)
    assert np.array_equal(b.to_numpy(), a)
    assert client.backend == "cpu"
    print(client.status())
