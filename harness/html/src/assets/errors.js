(function () {
  'use strict';
  var count = 0;
  window.addEventListener('error', function (e) {
    count += 1;
    document.documentElement.setAttribute('data-script-errors', String(count));
    var el = document.getElementById('script-errors');
    if (el) {
      el.hidden = false;
      el.textContent += 'The report\'s script failed: ' + String(e.message || e) + '\n';
    }
  });
})();
